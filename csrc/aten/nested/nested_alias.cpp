#include "aten/nested/nested_alias.h"

#include "aten/alias.h"

#include <ATen/NestedTensorImpl.h>

namespace torch_fl {
namespace {

// A nested tensor over `buffer` (a 1-D tensor over a whole storage) with `like`'s metadata; the
// buffer's device makes its dispatch keys (NestedTensorPrivateUse1, NestedTensorCPU, ...).
at::Tensor nested_over(const at::native::NestedTensorImpl& like, const at::Tensor& buffer) {
  return at::detail::make_tensor<at::native::NestedTensorImpl>(
      buffer, like.get_nested_sizes(), like.get_nested_strides(), like.get_storage_offsets());
}

} // namespace

at::Tensor native_nested_alias(const at::Tensor& flagos) {
  const auto* impl = at::native::get_nested_tensor_impl(flagos);
  return nested_over(*impl, native_alias(impl->get_unsafe_storage_as_tensor()));
}

at::Tensor flagos_nested_from_native(const at::Tensor& native, c10::DeviceIndex index) {
  const auto* impl = at::native::get_nested_tensor_impl(native);
  return nested_over(*impl, flagos_from_native(impl->get_unsafe_storage_as_tensor(), index));
}

} // namespace torch_fl
