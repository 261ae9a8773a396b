#include "aten/native/histc.h"

#include "aten/device_check.h"
#include "aten/native/routed_call.h"

#include <ATen/ops/bincount.h>
#include <ATen/ops/histc.h>
#include <ATen/ops/histc_ops.h>

namespace torch_fl::native {
namespace {

// The integer dtypes CUDA's histc takes (not bool, not the unsigned 16-64-bit ones).
bool is_integer(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kByte:
    case at::kChar:
    case at::kShort:
    case at::kInt:
    case at::kLong:
      return true;
    default:
      return false;
  }
}

// As CUDA's: the bounds are converted to the integer accumulate type (truncated toward zero:
// min=0.5 counts from 0), an empty range takes the data's, and each value's bin is found in
// integer arithmetic ((value - min) * bins / (max - min), the last bin closed).
at::Tensor integer_histogram(
    const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  TORCH_CHECK(bins > 0, "bins must be > 0");
  auto lo = min.to<int64_t>();
  auto hi = max.to<int64_t>();
  const at::Tensor values = self.to(at::kLong);
  if (lo == hi && values.numel() > 0) {
    lo = values.min().item<int64_t>();
    hi = values.max().item<int64_t>();
  }
  if (lo == hi) {
    --lo;
    ++hi;
  }
  TORCH_CHECK(lo < hi, "max must be larger than min");
  const at::Tensor inside = values.masked_select(values.ge(lo).logical_and_(values.le(hi)));
  const at::Tensor bin = inside.sub(lo).mul_(bins).div_(hi - lo, "floor").clamp_max_(bins - 1);
  return at::bincount(bin, {}, bins).to(self.scalar_type());
}

} // namespace

at::Tensor histc(
    const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  if (!is_integer(self)) {
    return Routed<at::_ops::histc>::call(self, bins, min, max);
  }
  return integer_histogram(self, bins, min, max);
}

at::Tensor& histc_out(
    const at::Tensor& self,
    int64_t bins,
    const at::Scalar& min,
    const at::Scalar& max,
    at::Tensor& out) {
  if (!is_integer(self)) {
    return Routed<at::_ops::histc_out>::call(self, bins, min, max, out);
  }
  // As CUDA's: counts of any dtype are copied into `out`, resized as needed.
  if (out.device() != self.device()) {
    fail_mixed_devices(self.device(), out.device(), "out", "aten::histc.out");
  }
  const at::Tensor counts = integer_histogram(self, bins, min, max);
  out.resize_(counts.sizes());
  return out.copy_(counts);
}

} // namespace torch_fl::native
