#include "aten/host_copy.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>

namespace torch_fl {
namespace {

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

// Overlapping elements, and a span not much larger than the tensor, so mirroring it costs
// about what copying its values would (an expanded column of a large matrix is copied by value).
bool mirrors_layout(const at::Tensor& t, int64_t span) {
  if (t.layout() != c10::kStrided || t.is_conj() || t.is_neg() || span == 0) {
    return false;
  }
  const bool overlaps = span < t.numel() || at::has_internal_overlap(t) == at::MemOverlap::Yes;
  return overlaps && span <= 4 * t.numel() + 4096;
}

// A tensor over `storage`'s elements [offset, offset + span), with no autograd history.
at::Tensor span_of(
    const c10::Storage& storage, const at::TensorOptions& options, int64_t offset, int64_t span) {
  return at::empty({0}, options).set_(storage, offset, {span}, {1});
}

} // namespace

HostCopy host_copy_for_kernel(const at::Tensor& flagos, bool written) {
  const c10::Device host(c10::DeviceType::CPU);
  const int64_t span = written ? storage_span(flagos) : 0;
  if (!written || !mirrors_layout(flagos, span)) {
    return {flagos.to(host), {}};
  }
  auto host_span = at::empty({span}, flagos.options().device(host));
  host_span.copy_(span_of(flagos.storage(), flagos.options(), flagos.storage_offset(), span));
  auto mirror = host_span.storage();
  auto tensor =
      at::empty({0}, host_span.options()).set_(mirror, 0, flagos.sizes(), flagos.strides());
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
    // As the CPU kernel resized its output: resize, then take the strides it chose when they
    // describe a dense layout (resize_ made room for as many elements).
    flagos.resize_(host.sizes());
    if (flagos.strides() != host.strides() && host.is_non_overlapping_and_dense()) {
      flagos.as_strided_(host.sizes(), host.strides(), flagos.storage_offset());
    }
  }
  flagos.copy_(host);
}

} // namespace torch_fl
