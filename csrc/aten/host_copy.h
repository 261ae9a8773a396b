#pragma once

// The Copy mapping's host tensors (aliased_call.h): a CPU kernel run for a flagos call on a
// device accelerator works on host copies of the arguments, and written ones are copied back.
//
// A written tensor whose elements may overlap (an expanded `zeros(1, n).expand(m, n)`, an
// overlapping as_strided) is mirrored with its layout: the host copy is its storage span, viewed
// with the same sizes and strides, so the CPU kernel sees the overlap and refuses, warns or writes
// exactly as it does for a CPU tensor, and the span goes back whole. Other tensors are copied by
// value. Written back, a result the kernel resized keeps the strides the kernel gave it (an `out=`
// of a channels-last input is channels-last, as on CPU).

#include <ATen/core/Tensor.h>

namespace torch_fl {

struct HostCopy {
  at::Tensor tensor;
  c10::Storage mirror; // the span's host storage, for a mirrored written tensor
};

HostCopy host_copy_for_kernel(const at::Tensor& flagos, bool written);

// Writes the kernel's update of `host` (made by host_copy_for_kernel) back into `flagos`.
void write_back_host_copy(
    const at::Tensor& flagos, const at::Tensor& host, const c10::Storage& mirror);

// A result of the CPU kernel on `device`, strided as the kernel made it (a non-dense result,
// such as a narrowed column-major buffer, keeps its strides; `.to()` would make it contiguous).
at::Tensor device_copy_of_result(const at::Tensor& host, const c10::Device& device);

} // namespace torch_fl
