#pragma once

// The operators flagos implements itself: allocation, views (so storage identity and autograd
// view tracking hold), resizing, copies between devices and scalar reads.

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <optional>

namespace torch_fl::native {

// The flagos device index a factory's `device` option names (checked; the current device when
// unset or without an index).
c10::DeviceIndex factory_device_index(std::optional<at::Device> device);

at::Tensor empty_memory_format(
    at::IntArrayRef size,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory,
    std::optional<at::MemoryFormat> memory_format);

at::Tensor empty_strided(
    at::IntArrayRef size,
    at::IntArrayRef stride,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory);

at::Tensor as_strided(
    const at::Tensor& self,
    at::IntArrayRef size,
    at::IntArrayRef stride,
    std::optional<int64_t> storage_offset);
at::Tensor view(const at::Tensor& self, at::IntArrayRef size);
at::Tensor reshape_alias(const at::Tensor& self, at::IntArrayRef size, at::IntArrayRef stride);

const at::Tensor& resize_(
    const at::Tensor& self, at::IntArrayRef size, std::optional<at::MemoryFormat> memory_format);

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
at::Scalar local_scalar_dense(const at::Tensor& self);

at::Tensor& set_storage(
    at::Tensor& self,
    c10::Storage source,
    int64_t storage_offset,
    at::IntArrayRef size,
    at::IntArrayRef stride);
at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source);
at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_empty(at::Tensor& self);
bool is_set_to(const at::Tensor& self, const at::Tensor& tensor);
// Whether `self` may take over `from`'s metadata and memory (`self.data = from`).
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);

void record_stream(at::Tensor& self, c10::Stream stream);

} // namespace torch_fl::native
