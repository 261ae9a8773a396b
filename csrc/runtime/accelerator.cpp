#include "runtime/accelerator.h"

#include "runtime/fork_guard.h"

#include <c10/util/Exception.h>

namespace torch_fl {

void check_device_index(int64_t index) {
  const auto count = accelerator().device_count();
  TORCH_CHECK_INDEX(
      index >= 0 && index < count,
      "Invalid device flagos:",
      index,
      ": this process has ",
      static_cast<int>(count),
      " flagos device(s) (flagos:0 to flagos:",
      static_cast<int>(count) - 1,
      ") on the ",
      accelerator().name(),
      " accelerator",
      std::string(accelerator().name()) == "cpu"
          ? "; set FLAGOS_CPU_DEVICE_COUNT before torch_fl loads (before `import torch`) to "
            "change the count"
          : "");
}

std::atomic<int8_t> detail::single_device{-1};

namespace {
// One device, and not in a bad fork (where the guard's read raises the error naming the fix):
// the current device is flagos:0 without asking the runtime.
bool only_device_zero() {
  int8_t known = detail::single_device.load(std::memory_order_relaxed);
  if (C10_UNLIKELY(known < 0)) {
    known = accelerator().device_count() == 1 ? 1 : 0;
    detail::single_device.store(known, std::memory_order_relaxed);
  }
  return known == 1 && !in_bad_fork();
}
} // namespace

bool detail::is_current_device_slow(c10::DeviceIndex index) {
  if (only_device_zero()) {
    return true;
  }
  return accelerator_guard().getDevice().index() == index;
}

void detail::switch_device(c10::OptionalDeviceGuard& guard, c10::DeviceIndex index) {
  guard.reset_device(c10::Device(c10::DeviceType::PrivateUse1, index));
}

c10::DeviceIndex resolve_device_index(c10::DeviceIndex index) {
  if (index == -1) {
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

std::vector<MemorySegment> Accelerator::memory_segments() const {
  TORCH_CHECK(
      false, "the ", name(), " accelerator's memory is the native pool's; snapshot it there");
}

} // namespace torch_fl
