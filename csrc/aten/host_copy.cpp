#include "aten/host_copy.h"

#include <ATen/ops/empty.h>
#include <c10/util/SmallVector.h>

#include <algorithm>

namespace torch_fl {
namespace {

// A non-dense result keeps the kernel's strides while its storage span is at most this many
// times its element count.
constexpr int64_t kMaxResultSpanPerElement = 2;

// Elements from the tensor's first to its last (strides are never negative); 0 when empty.
int64_t storage_span(const at::Tensor& t) {
  if (t.numel() == 0) {
    return 0;
  }
  int64_t span = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    span += (t.size(d) - 1) * t.stride(d);
  }
  return span;
}

// Whether no two elements can share memory: with the dimensions taken by increasing stride,
// each stride passes the extent of those before it. False for some layouts that do not
// overlap either (interleaved ones); mirroring those is merely a span copy.
bool provably_non_overlapping(const at::Tensor& t) {
  c10::SmallVector<std::pair<int64_t, int64_t>, 6> dims; // (stride, size), sizes above 1
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) {
      dims.emplace_back(t.stride(d), t.size(d));
    }
  }
  std::sort(dims.begin(), dims.end());
  int64_t extent = 1; // elements covered by the dimensions so far
  for (const auto& [stride, size] : dims) {
    if (stride < extent) {
      return false;
    }
    extent = stride * (size - 1) + extent;
  }
  return true;
}

// Mirrored: written tensors whose elements may overlap (the CPU kernel must see the overlap).
bool mirrors_layout(const at::Tensor& t) {
  return t.layout() == c10::kStrided && !t.is_conj() && !t.is_neg() && t.numel() > 0 &&
         !provably_non_overlapping(t);
}

// A tensor over `storage`'s elements [offset, offset + span), with no autograd history.
at::Tensor span_of(
    const c10::Storage& storage, const at::TensorOptions& options, int64_t offset, int64_t span) {
  return at::empty({0}, options).set_(storage, offset, {span}, {1});
}

// `t`'s storage span copied to `device`, viewed with `t`'s sizes and strides (offset 0).
at::Tensor span_copy(const at::Tensor& t, const c10::Device& device) {
  const int64_t span = storage_span(t);
  auto copied = at::empty({span}, t.options().device(device));
  copied.copy_(span_of(t.storage(), t.options(), t.storage_offset(), span));
  return at::empty({0}, copied.options()).set_(copied.storage(), 0, t.sizes(), t.strides());
}

} // namespace

HostCopy host_copy_for_kernel(const at::Tensor& flagos, bool written) {
  const c10::Device host(c10::DeviceType::CPU);
  if (!written || !mirrors_layout(flagos)) {
    return {flagos.to(host), {}};
  }
  auto tensor = span_copy(flagos, host);
  auto mirror = tensor.storage();
  return {std::move(tensor), std::move(mirror)};
}

void write_back_host_copy(
    const at::Tensor& flagos, const at::Tensor& host, const c10::Storage& mirror) {
  if (mirror && host.storage().is_alias_of(mirror) && host.storage_offset() == 0 &&
      host.sizes() == flagos.sizes() && host.strides() == flagos.strides()) {
    const int64_t span = storage_span(flagos);
    span_of(flagos.storage(), flagos.options(), flagos.storage_offset(), span)
        .copy_(span_of(mirror, host.options(), 0, span));
    return;
  }
  if (flagos.sizes() != host.sizes()) {
    // As the CPU kernel resized its output: resize, then take the strides it chose (a dense
    // layout fits the elements resize_ made room for; another needs its whole span).
    if (host.is_non_overlapping_and_dense()) {
      flagos.resize_(host.sizes());
      if (flagos.strides() != host.strides()) {
        flagos.as_strided_(host.sizes(), host.strides(), flagos.storage_offset());
      }
    } else if (provably_non_overlapping(host)) {
      flagos.resize_({storage_span(host)});
      flagos.as_strided_(host.sizes(), host.strides(), flagos.storage_offset());
    } else {
      flagos.resize_(host.sizes());
    }
  }
  flagos.copy_(host);
}

at::Tensor device_copy_of_result(const at::Tensor& host, const c10::Device& device) {
  if (host.layout() != c10::kStrided || host.is_non_overlapping_and_dense() || host.is_conj() ||
      host.is_neg() || host.numel() == 0 ||
      (storage_span(host) > kMaxResultSpanPerElement * host.numel() &&
       provably_non_overlapping(host))) {
    // Keeps a dense layout's strides. A scattered view (a kernel's narrow slice of a large
    // buffer) is packed in its strides' order: the elements between are not worth copying.
    // Overlapping results keep their layout, so writes to them are refused as on CPU.
    return host.to(device);
  }
  return span_copy(host, device);
}

} // namespace torch_fl
