// What flagos refuses, and the way out. Each kind of tensor flagos cannot hold or compute on
// gets a NotImplementedError naming the operator and what to do instead, where torch would say
// "Could not run ... with arguments from the '<key>flagos' backend" or, worse, make a flagos
// tensor that no later operator can use:
// - compressed sparse layouts (CSR, CSC, BSR, BSC): refused where they would be made (their
//   factories) and by every operator on one (sparse COO works: register_sparse.cpp);
// - quantized tensors: `q.to("flagos")` and the quantized factories (a kernel's quantized
//   result is refused when it is re-labelled, alias.cpp).
// (Strided nested tensors run the native nested kernels: register_nested.cpp.)

#include <torch/library.h>

namespace torch_fl {
namespace {

constexpr char kCompressed[] =
    "flagos supports the sparse COO layout (torch.sparse_coo) but not the compressed ones (CSR, "
    "CSC, BSR, BSC). Keep compressed tensors on the cpu, or convert them there with "
    ".to_sparse_coo() or .to_dense() before moving them to flagos.";
constexpr char kQuantized[] =
    "flagos does not hold quantized tensors. Quantize and run quantized kernels on the cpu, and "
    "keep flagos tensors in non-quantized dtypes (q.dequantize() converts back).";
template <const char* Why>
void refuse(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().operator_name(), ": ", Why);
}

template <const char* Why>
torch::CppFunction refusal() {
  return torch::CppFunction::makeFromBoxedFunction<&refuse<Why>>();
}

// The compressed factories: composites that dispatch on their options (BackendSelect picks
// SparseCsrPrivateUse1) or on their dense flagos parts (PrivateUse1).
constexpr const char* kCompressedFactories[] = {
    "_sparse_compressed_tensor_unsafe",
    "_sparse_csr_tensor_unsafe",
    "_sparse_csc_tensor_unsafe",
    "_sparse_bsr_tensor_unsafe",
    "_sparse_bsc_tensor_unsafe",
    "sparse_compressed_tensor.comp_plain_value",
    "sparse_compressed_tensor.comp_plain_value_size",
    "sparse_csr_tensor.crow_col_value",
    "sparse_csr_tensor.crow_col_value_size",
    "sparse_csc_tensor.ccol_row_value",
    "sparse_csc_tensor.ccol_row_value_size",
    "sparse_bsr_tensor.crow_col_value",
    "sparse_bsr_tensor.crow_col_value_size",
    "sparse_bsc_tensor.ccol_row_value",
    "sparse_bsc_tensor.ccol_row_value_size"};

// Accessors with composite kernels of their own, which win over the fallback below: torch's
// zeros_like(..., layout=torch.sparse_csr) makes the tensor without a factory above and reads
// it back through them.
constexpr const char* kCompressedAccessors[] = {
    "crow_indices", "col_indices", "ccol_indices", "row_indices"};

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  for (const char* name : kCompressedFactories) {
    m.impl(name, refusal<kCompressed>());
  }
  for (const char* name : kCompressedAccessors) {
    m.impl(name, refusal<kCompressed>());
  }
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : kCompressedFactories) {
    m.impl(name, refusal<kCompressed>());
  }
}

TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(refusal<kCompressed>());
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(refusal<kQuantized>());
}

} // namespace
} // namespace torch_fl
