#include "aten/sparse/sparse_alias.h"

#include "aten/alias.h"
#include "runtime/accelerator.h"

#include <ATen/SparseTensorImpl.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>

#include <utility>

namespace torch_fl {
namespace {

at::SparseTensorImpl* sparse_impl(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(t.layout() == c10::kSparse, "expected a sparse COO tensor");
  return static_cast<at::SparseTensorImpl*>(t.unsafeGetTensorImpl());
}

// A sparse COO tensor on `device` (flagos:index or its native device) over `indices` and
// `values` (no copy, no validation: they come from a valid sparse tensor). The device is made
// current first: a SparseTensorImpl requires its parts on the device current when it was made.
at::Tensor sparse_over(
    const at::SparseTensorImpl& like,
    c10::SymIntArrayRef sizes,
    const at::Tensor& indices,
    const at::Tensor& values,
    c10::Device device,
    c10::DeviceIndex index) {
  DeviceScope scope(index);
  return at::native::new_with_dims_and_tensor_sparse_symint(
      like.sparse_dim(),
      like.dense_dim(),
      sizes,
      indices,
      values,
      values.scalar_type(),
      c10::kSparse,
      device,
      std::nullopt,
      like.coalesced());
}

// The indices and values of a native sparse tensor as flagos:index tensors (one relabeler: a
// kernel may return parts that share memory).
std::pair<at::Tensor, at::Tensor> flagos_parts(
    const at::SparseTensorImpl& native, c10::DeviceIndex index) {
  StorageRelabeler relabeler(index);
  return {
      flagos_from_native(native.indices(), relabeler),
      flagos_from_native(native.values(), relabeler)};
}

} // namespace

at::Tensor native_sparse_alias(const at::Tensor& flagos, bool resizable) {
  const auto* impl = sparse_impl(flagos);
  return sparse_over(
      *impl,
      flagos.sym_sizes(),
      native_alias(impl->indices(), resizable),
      native_alias(impl->values(), resizable),
      accelerator().native_device(flagos.device().index()),
      flagos.device().index());
}

at::Tensor flagos_sparse_from_native(const at::Tensor& native, c10::DeviceIndex index) {
  const auto* impl = sparse_impl(native);
  auto [indices, values] = flagos_parts(*impl, index);
  return sparse_over(
      *impl,
      native.sym_sizes(),
      indices,
      values,
      c10::Device(c10::DeviceType::PrivateUse1, index),
      index);
}

void sync_sparse_from_alias(const at::Tensor& original, const at::Tensor& alias) {
  auto* dst = sparse_impl(original);
  const auto* src = sparse_impl(alias);
  auto [indices, values] = flagos_parts(*src, original.device().index());
  dst->raw_resize_(src->sparse_dim(), src->dense_dim(), alias.sizes());
  dst->set_indices_and_values_unsafe(indices, values);
  dst->set_coalesced(src->coalesced());
}

} // namespace torch_fl
