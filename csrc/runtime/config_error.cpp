#include "runtime/config_error.h"

#include "runtime/fork_safe_mutex.h"

#include <mutex>

namespace torch_fl {
namespace {
// Made on first use (which the import's configuration check makes, before any other lock is
// taken; a static made at load could be used by another file's load-time code before it
// exists). Never destroyed: read at any time.
ForkSafeMutex& error_mutex() {
  static auto* m = new ForkSafeMutex();
  return *m;
}
std::string& error_text() {
  static std::string text;
  return text;
}
} // namespace

void set_config_error(std::string message) {
  std::lock_guard lock(error_mutex());
  auto& text = error_text();
  text = text.empty() ? std::move(message) : text + "\n" + message;
}

std::string config_error() {
  std::lock_guard lock(error_mutex());
  return error_text();
}

} // namespace torch_fl
