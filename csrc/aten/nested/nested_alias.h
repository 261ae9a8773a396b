#pragma once

#include "macros.h"

// Zero-copy mapping of strided nested tensors between flagos and the native device.
//
// A strided nested tensor is one buffer (its storage) plus metadata on the host: the sizes,
// strides and storage offsets of its components. Its native counterpart is a native nested
// tensor over a native alias of that buffer with the same metadata; results come back the same
// way, their buffer re-labelled as flagos memory (alias.h). (The jagged layout needs none of
// this: it is a Python subclass over dense flagos tensors.)

#include <ATen/core/Tensor.h>

namespace torch_fl {

// A native nested tensor over the memory of a flagos strided nested tensor.
FLAGOS_API at::Tensor native_nested_alias(const at::Tensor& flagos);

// A flagos nested tensor on flagos:index over the buffer of a native one.
FLAGOS_API at::Tensor flagos_nested_from_native(const at::Tensor& native, c10::DeviceIndex index);

} // namespace torch_fl
