#include "runtime/config_error.h"

#include "runtime/fork_safe_mutex.h"

#include <mutex>

namespace torch_fl {
namespace {
ForkSafeMutex& error_mutex() {
  static ForkSafeMutex m;
  return m;
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
