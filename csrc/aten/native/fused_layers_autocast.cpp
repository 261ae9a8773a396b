#include "aten/native/fused_layers_autocast.h"

#include "runtime/accelerator.h"

namespace torch_fl::native {

bool native_modules_skip_fused_layers_under_autocast() {
  static const bool skip = accelerator().native_device_type() == c10::DeviceType::CUDA;
  return skip;
}

} // namespace torch_fl::native
