// Quantized tensors are not supported on flagos: every operator that would make or use one on
// flagos (its key is QuantizedPrivateUse1: `q.to("flagos")`, `torch.empty_quantized`) says so,
// as does re-labelling a quantized result (alias.cpp), instead of torch's "Could not run".

#include <torch/library.h>

namespace torch_fl {
namespace {

void refuse_quantized(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false,
      op.schema().operator_name(),
      ": flagos does not hold quantized tensors. Quantize and run quantized kernels on the cpu, "
      "and keep flagos tensors in non-quantized dtypes (q.dequantize() converts back).");
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuse_quantized>());
}

} // namespace
} // namespace torch_fl
