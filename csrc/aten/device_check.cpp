#include "aten/device_check.h"

#include <c10/util/Exception.h>

#include <iterator>
#include <string>
#include <unordered_set>

namespace torch_fl {
namespace {

// "name.overload" of each aten operator whose CUDA kernel checks devices exactly, for the torch
// this library was built against (cmake/gen_device_check_table.py).
constexpr const char* kExactDeviceCheckOperators[] = {
#include "exact_device_check_ops.inc"
    nullptr};

bool in_exact_device_check_table(const c10::OperatorName& name) {
  static const std::unordered_set<std::string> table(
      std::begin(kExactDeviceCheckOperators), std::end(kExactDeviceCheckOperators) - 1);
  constexpr std::string_view aten = "aten::";
  if (name.name.compare(0, aten.size(), aten) != 0) {
    return false;
  }
  std::string key = name.name.substr(aten.size());
  if (!name.overload_name.empty()) {
    key += "." + name.overload_name;
  }
  return table.count(key) != 0;
}

} // namespace

bool cuda_checks_devices(const c10::OperatorHandle& op) {
  // Asked only when a CPU tensor meets flagos ones, often for the same operator in a row.
  thread_local const c10::OperatorName* last = nullptr;
  thread_local bool last_checks = false;
  const auto& name = op.operator_name();
  if (&name != last) {
    last_checks = in_exact_device_check_table(name);
    last = &name;
  }
  return last_checks;
}

void fail_mixed_devices(
    const c10::Device& device,
    const c10::Device& other,
    std::string_view argument,
    std::string_view op,
    std::string_view hint) {
  TORCH_CHECK(
      false,
      "Expected all tensors to be on the same device, but found at least two devices, ",
      device,
      " and ",
      other,
      "! (argument '",
      argument,
      "' of ",
      op,
      hint,
      ")");
}

} // namespace torch_fl
