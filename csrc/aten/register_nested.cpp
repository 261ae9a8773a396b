// Strided nested tensors on flagos: a NestedTensorImpl over one flagos buffer. Every operator on
// one runs the native device's nested kernel over a zero-copy alias (aten/nested/nested_alias.h),
// as dense operators run its dense kernels; it is not routed (routing tables name dense
// kernels). This is what nn.TransformerEncoder's inference path with a padding mask uses
// (torch._nested_tensor_from_mask, the fused encoder layer, to_padded_tensor). The jagged
// layout needs none of it: a Python subclass over dense flagos tensors.

#include "aten/nested/nested_kernels.h"

#include "aten/native_layout_kernels.h"

#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/empty_like_native.h>
#include <torch/library.h>

#include <mutex>

namespace torch_fl {
namespace {

void nested_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  call_native_layout_kernel(
      op,
      stack,
      native_layout_key(c10::DispatchKey::NestedTensor),
      "nested tensors either; use the jagged layout (torch.nested.nested_tensor(..., "
      "layout=torch.jagged)) or .to_padded_tensor() first");
}

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nested_fallback>());
}

// Torch's device-generic nested kernels for what may cross devices (their buffers copy as dense
// tensors): over an alias, `ntf.cpu()` would come back re-labelled as flagos, and
// `nt.to("flagos")` (which BackendSelect sends here) would start from a cpu tensor.
TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("_to_copy", TORCH_FN(at::native::_to_copy_nested));
  m.impl("empty_like", TORCH_FN(at::native::empty_like_nested));
  m.impl("copy_", TORCH_FN(at::native::copy_nested_));
}

} // namespace

void register_nested_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_ahead_of_composites(
        c10::DispatchKey::NestedTensorPrivateUse1,
        native_layout_key(c10::DispatchKey::NestedTensor),
        [] { return torch::CppFunction::makeFromBoxedFunction<&nested_fallback>(); });
  });
}

} // namespace torch_fl
