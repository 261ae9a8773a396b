#include "runtime/config_error.h"

#include <mutex>

namespace torch_fl {
namespace {
std::mutex& error_mutex() {
  static std::mutex m;
  return m;
}
std::string& error_text() {
  static std::string text;
  return text;
}
} // namespace

void set_config_error(std::string message) {
  std::lock_guard<std::mutex> lock(error_mutex());
  auto& text = error_text();
  text = text.empty() ? std::move(message) : text + "\n" + message;
}

std::string config_error() {
  std::lock_guard<std::mutex> lock(error_mutex());
  return error_text();
}

} // namespace torch_fl
