#include "aten/native/minimal.h"

#include "aten/alias.h"
#include "runtime/accelerator.h"
#include "runtime/storage.h"

#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/view_native.h>

namespace torch_fl::native {
namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

bool is_flagos(const at::Tensor& t) {
  return t.device().type() == kFlagos;
}

void check_factory_options(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(
      !layout.has_value() || *layout == at::kStrided,
      "flagos supports strided tensors only, got layout ",
      *layout);
  TORCH_CHECK(
      !pin_memory.value_or(false), "Only dense CPU tensors can be pinned; flagos tensors cannot");
}

// Sets sizes (and strides, contiguous when none are given) and grows the storage to fit. The
// same sizes (and strides, when given) leave the tensor as it is, as CPU's and CUDA's resize
// do: a transposed tensor resized to its own shape keeps its strides and values.
void resize_impl(
    c10::TensorImpl* self, at::IntArrayRef size, std::optional<at::IntArrayRef> stride) {
  if (self->sizes() == size && (!stride.has_value() || self->strides() == *stride)) {
    return;
  }
  // Sized from the arguments, before the tensor changes, as CPU's and CUDA's resize: a negative
  // stride (which set_sizes_and_strides would make contiguous) or an overflowing size is refused
  // with their message and leaves the tensor as it was.
  const auto itemsize = self->dtype().itemsize();
  const size_t needed =
      stride.has_value()
          ? at::detail::computeStorageNbytes(size, *stride, itemsize, self->storage_offset())
          : at::detail::computeStorageNbytesContiguous(size, itemsize, self->storage_offset());
  if (stride.has_value()) {
    self->set_sizes_and_strides(size, *stride);
  } else {
    self->set_sizes_contiguous(size);
  }
  if (self->numel() > 0 && needed > self->storage().nbytes()) {
    resize_storage_bytes(self->storage().unsafeGetStorageImpl(), needed);
  }
}

// torch.use_deterministic_algorithms(True) with fill_uninitialized_memory (its default): new
// memory is filled with NaN (floating and complex) or the dtype's maximum, as CPU's and CUDA's
// empty and resize_ do.
bool fill_uninitialized() {
  const auto& context = at::globalContext();
  return C10_UNLIKELY(
      context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory());
}

} // namespace

c10::DeviceIndex factory_device_index(std::optional<at::Device> device) {
  if (device.has_value()) {
    TORCH_CHECK(
        device->type() == kFlagos,
        "flagos factory got device ",
        *device,
        "; expected a flagos device");
    return resolve_device_index(device->index());
  }
  return resolve_device_index(-1);
}

at::Tensor empty_memory_format(
    at::IntArrayRef size,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory,
    std::optional<at::MemoryFormat> memory_format) {
  check_factory_options(layout, pin_memory);
  const auto index = factory_device_index(device);
  DeviceScope scope(index);
  at::Tensor result = at::detail::empty_generic(
      size,
      accelerator().device_allocator(),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype),
      memory_format);
  if (fill_uninitialized()) {
    at::native::fill_empty_deterministic_(result);
  }
  return result;
}

at::Tensor empty_strided(
    at::IntArrayRef size,
    at::IntArrayRef stride,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory) {
  check_factory_options(layout, pin_memory);
  const auto index = factory_device_index(device);
  DeviceScope scope(index);
  at::Tensor result = at::detail::empty_strided_generic(
      size,
      stride,
      accelerator().device_allocator(),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype));
  if (fill_uninitialized()) {
    at::native::fill_empty_deterministic_(result);
  }
  return result;
}

at::Tensor as_strided(
    const at::Tensor& self,
    at::IntArrayRef size,
    at::IntArrayRef stride,
    std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, at::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor reshape_alias(const at::Tensor& self, at::IntArrayRef size, at::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

const at::Tensor& resize_(
    const at::Tensor& self, at::IntArrayRef size, std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  const auto old_nbytes = static_cast<int64_t>(impl->unsafe_storage().nbytes());
  resize_impl(impl, size, std::nullopt);
  if (memory_format.has_value()) {
    TORCH_CHECK(
        *memory_format != at::MemoryFormat::Preserve,
        "Unsupported memory format",
        *memory_format); // (no space: CPU's message)
    impl->empty_tensor_restride(*memory_format);
  }
  if (fill_uninitialized()) {
    at::native::fill_resize_deterministic_(self, old_nbytes);
  }
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  const auto& device_side = is_flagos(dst) ? dst : self;
  DeviceScope scope(device_side.device().index());
  at::Tensor native_dst = is_flagos(dst) ? native_alias(dst) : dst;
  at::Tensor native_src = is_flagos(self) ? native_alias(self) : self;
  if (is_flagos(dst) && is_flagos(self)) {
    // One storage for the two when they share one, so the CPU copy refuses a partial overlap.
    SharedAliasStorage shared;
    shared.add(dst, native_dst, true);
    shared.add(self, native_src, false);
    shared.apply();
  }
  native_dst.copy_(native_src, non_blocking);
  if (is_flagos(dst)) {
    release_alias(native_dst);
  }
  if (is_flagos(self)) {
    release_alias(native_src);
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    dst.resize_(self.sizes());
  }
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  DeviceScope scope(self.device().index());
  at::Tensor alias = native_alias(self);
  at::Scalar value = at::_local_scalar_dense(alias);
  release_alias(alias);
  return value;
}

at::Tensor& set_storage(
    at::Tensor& self,
    c10::Storage source,
    int64_t storage_offset,
    at::IntArrayRef size,
    at::IntArrayRef stride) {
  at::native::checkSetStorage(self, std::move(source), storage_offset, size, stride);
  auto* impl = self.unsafeGetTensorImpl();
  impl->set_storage_offset(storage_offset);
  resize_impl(
      impl, size, stride.data() != nullptr ? std::optional<at::IntArrayRef>(stride) : std::nullopt);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  const auto itemsize = self.dtype().itemsize();
  const int64_t numel = static_cast<int64_t>(source.nbytes() / itemsize);
  return set_storage(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  TORCH_CHECK(
      self.dtype() == source.dtype(),
      "Could not set tensor of type ",
      source.dtype(),
      " to a tensor of type ",
      self.dtype());
  if (!self.is_same(source)) {
    set_storage(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
  }
  return self;
}

at::Tensor& set_empty(at::Tensor& self) {
  DeviceScope scope(self.device().index()); // the allocator serves the current device
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), 0, accelerator().device_allocator(), /*resizable=*/true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

bool is_set_to(const at::Tensor& self, const at::Tensor& tensor) {
  return at::native::is_set_to(self, tensor);
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(
      stream.device_type() == c10::DeviceType::PrivateUse1,
      "record_stream: a flagos tensor takes a flagos stream (torch.flagos.current_stream() or "
      "torch.flagos.Stream()), not a ",
      stream.device(),
      " stream");
  accelerator().device_allocator()->recordStream(self.storage().data_ptr(), stream);
}

// torch's own answer leaves PrivateUse1 out of the dense backends that may swap places, so
// Module.to("flagos") could not keep its Parameter objects (`param.data = moved`) and gave each
// module a new one, untying shared weights. A flagos tensor is a plain strided TensorImpl like
// a dense CPU or CUDA one, so it may take their place and they its.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  const auto is_dense = [](c10::DispatchKeySet ks) {
    constexpr auto dense_backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit,
         c10::BackendComponent::CUDABit,
         c10::BackendComponent::HIPBit,
         c10::BackendComponent::XPUBit,
         c10::BackendComponent::MPSBit,
         c10::BackendComponent::HPUBit,
         c10::BackendComponent::MTIABit,
         c10::BackendComponent::PrivateUse1Bit});
    return ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && ks.has_any(dense_backends);
  };
  auto* impl = self.unsafeGetTensorImpl();
  return impl->has_compatible_shallow_copy_type(from.key_set()) ||
         (is_dense(self.key_set()) && is_dense(from.key_set()));
}

} // namespace torch_fl::native
