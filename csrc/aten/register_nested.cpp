// Nested tensors on flagos: the jagged layout (torch.jagged, a Python tensor subclass over
// dense flagos tensors) works like any flagos code; the strided nested layout has no flagos
// kernels (torch's are registered per device key), so its operators say what to use instead
// of torch's "Could not run ... NestedTensorflagos".

#include <torch/library.h>

namespace torch_fl {
namespace {

void refuse_strided_nested(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false,
      op.schema().operator_name(),
      ": flagos runs nested tensors in the jagged layout; make them with "
      "torch.nested.nested_tensor(..., layout=torch.jagged) (the strided nested layout has no "
      "flagos kernels).");
}

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_strided_nested>());
}

} // namespace
} // namespace torch_fl
