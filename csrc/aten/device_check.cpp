#include "aten/device_check.h"

#include <c10/util/Exception.h>

namespace torch_fl {

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
