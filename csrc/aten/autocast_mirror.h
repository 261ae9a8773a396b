#pragma once

// A native kernel that calls other operators inside (fused attention and transformer layers,
// RNN kernels, composite paths) dispatches them on native tensors, so they follow the native
// device's autocast state. Inside a flagos call they must follow flagos's, as operators inside a
// CUDA kernel follow CUDA's: under torch.autocast("flagos") they autocast, and an autocast
// enabled for the native device alone (torch.autocast("cpu") around flagos work) leaves them
// alone. AutocastAsFlagos gives the native device flagos's autocast state for the kernel's
// duration (thread-local state; nothing changes in the common case of both off).

#include <ATen/autocast_mode.h>

namespace torch_fl {

class AutocastAsFlagos {
 public:
  explicit AutocastAsFlagos(c10::DeviceType native) : native_(native) {
    const bool flagos_on = at::autocast::is_autocast_enabled(c10::DeviceType::PrivateUse1);
    native_on_ = at::autocast::is_autocast_enabled(native);
    if (!flagos_on && !native_on_) {
      return;
    }
    native_dtype_ = at::autocast::get_autocast_dtype(native);
    const auto flagos_dtype =
        flagos_on ? at::autocast::get_autocast_dtype(c10::DeviceType::PrivateUse1) : native_dtype_;
    if (flagos_on == native_on_ && flagos_dtype == native_dtype_) {
      return;
    }
    changed_ = true;
    at::autocast::set_autocast_enabled(native, flagos_on);
    at::autocast::set_autocast_dtype(native, flagos_dtype);
  }
  AutocastAsFlagos(const AutocastAsFlagos&) = delete;
  AutocastAsFlagos& operator=(const AutocastAsFlagos&) = delete;
  ~AutocastAsFlagos() {
    if (changed_) {
      at::autocast::set_autocast_enabled(native_, native_on_);
      at::autocast::set_autocast_dtype(native_, native_dtype_);
    }
  }

 private:
  c10::DeviceType native_;
  bool native_on_ = false;
  c10::ScalarType native_dtype_ = c10::ScalarType::Undefined;
  bool changed_ = false;
};

} // namespace torch_fl
