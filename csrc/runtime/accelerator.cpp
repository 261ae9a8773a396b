#include "runtime/accelerator.h"

#include "runtime/fork_guard.h"

#include <c10/util/Exception.h>

namespace torch_fl {

void check_device_index(c10::DeviceIndex index) {
  const auto count = accelerator().device_count();
  TORCH_CHECK_INDEX(
      index >= 0 && index < count,
      "Invalid device flagos:",
      static_cast<int>(index),
      ": this process has ",
      static_cast<int>(count),
      " flagos device(s) (flagos:0 to flagos:",
      static_cast<int>(count) - 1,
      ") on the ",
      accelerator().name(),
      " accelerator",
      std::string(accelerator().name()) == "cpu"
          ? "; set FLAGOS_CPU_DEVICE_COUNT before the first use to change the count"
          : "");
}

namespace {
// One device, and not in a bad fork (where the guard's read raises the error naming the fix):
// the current device is flagos:0 without asking the runtime.
bool only_device_zero() {
  static const bool single_device = accelerator().device_count() == 1;
  return single_device && !in_bad_fork();
}
} // namespace

bool is_current_device(c10::DeviceIndex index) {
  if (C10_LIKELY(only_device_zero())) {
    return true;
  }
  return accelerator().guard().getDevice().index() == index;
}

c10::DeviceIndex resolve_device_index(c10::DeviceIndex index) {
  if (index < 0) {
    return only_device_zero() ? 0 : accelerator().guard().getDevice().index();
  }
  check_device_index(index);
  return index;
}

void Accelerator::set_memory_fraction(double, c10::DeviceIndex) {
  TORCH_CHECK(false, "the ", name(), " accelerator's memory limit is set by its native pool");
}

double Accelerator::memory_fraction(c10::DeviceIndex) const {
  TORCH_CHECK(false, "the ", name(), " accelerator's memory limit is set by its native pool");
}

} // namespace torch_fl
