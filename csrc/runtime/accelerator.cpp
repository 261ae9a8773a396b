#include "runtime/accelerator.h"

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

c10::DeviceIndex resolve_device_index(c10::DeviceIndex index) {
  if (index < 0) {
    return accelerator().guard().getDevice().index();
  }
  check_device_index(index);
  return index;
}

} // namespace torch_fl
