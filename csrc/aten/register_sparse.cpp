// Sparse COO tensors on flagos: a SparseTensorImpl over flagos indices and values.
//
// Factories and the accessors of a sparse tensor's parts are torch's device-generic sparse
// kernels: the accessors must return the tensor's own indices and values (views of it), which a
// call over aliases could not. Every other sparse operator runs the native device's sparse
// kernel over zero-copy aliases (aten/sparse/sparse_alias.h), as dense ones run its dense
// kernels; it is not routed (routing tables name dense kernels). Compressed layouts (CSR, CSC,
// BSR, BSC) are refused (register_unsupported.cpp).

#include "aten/sparse/sparse_kernels.h"

#include "aten/native/minimal.h"
#include "aten/native_layout_kernels.h"
#include "runtime/accelerator.h"

#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <torch/library.h>

#include <mutex>

namespace torch_fl {
namespace {

// The sparse key of the native device (SparseCPU, SparseCUDA).
c10::DispatchKey native_sparse_key() {
  return native_layout_key(c10::DispatchKey::Sparse);
}

// torch's generated wrappers of its sparse factories make the tensor's device current first:
// a SparseTensorImpl takes the current device for its placeholder parts and then requires the
// real ones to be on it. These do the same around torch's device-generic factories (and check
// the index as flagos's dense factories do).
at::Tensor empty_sparse(
    c10::SymIntArrayRef size,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory,
    std::optional<at::MemoryFormat> memory_format) {
  DeviceScope scope(native::factory_device_index(device));
  return at::native::empty_sparse_symint(size, dtype, layout, device, pin_memory, memory_format);
}

at::Tensor sparse_with_dims(
    int64_t sparse_dim,
    int64_t dense_dim,
    at::IntArrayRef size,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory) {
  DeviceScope scope(native::factory_device_index(device));
  return at::native::new_with_dims_sparse(
      sparse_dim, dense_dim, size, dtype, layout, device, pin_memory);
}

at::Tensor sparse_with_dims_and_tensors(
    int64_t sparse_dim,
    int64_t dense_dim,
    c10::SymIntArrayRef size,
    const at::Tensor& indices,
    const at::Tensor& values,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> layout,
    std::optional<at::Device> device,
    std::optional<bool> pin_memory,
    std::optional<bool> is_coalesced) {
  // As the native check says it (which runs after this device's): flagos indices with cpu
  // values reach flagos's factory with the values' device.
  TORCH_CHECK(
      indices.device() == values.device(),
      "backend of indices (",
      indices.device(),
      ") must match backend of values (",
      values.device(),
      ")");
  DeviceScope scope(native::factory_device_index(device));
  return at::native::new_with_dims_and_tensor_sparse_symint(
      sparse_dim,
      dense_dim,
      size,
      indices,
      values,
      dtype,
      layout,
      device,
      pin_memory,
      is_coalesced);
}

void sparse_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  call_native_layout_kernel(
      op, stack, native_sparse_key(), "sparse tensors either; convert with .to_dense() first");
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_sparse));
  m.impl("_sparse_coo_tensor_with_dims", TORCH_FN(sparse_with_dims));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors", TORCH_FN(sparse_with_dims_and_tensors));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_dimI", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("_dimV", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("sparse_resize_", TORCH_FN(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_", TORCH_FN(at::native::sparse_resize_and_clear_));
  // copy_ may cross devices (cpu <-> flagos): it copies the parts, each a dense copy.
  m.impl("copy_", TORCH_FN(at::native::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_", TORCH_FN(at::native::copy_sparse_));
}

TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>());
}

} // namespace

void register_sparse_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_ahead_of_composites(c10::DispatchKey::SparsePrivateUse1, native_sparse_key(), [] {
      return torch::CppFunction::makeFromBoxedFunction<&sparse_fallback>();
    });
  });
}

} // namespace torch_fl
