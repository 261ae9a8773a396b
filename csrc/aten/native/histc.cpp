#include "aten/native/histc.h"

#include "aten/device_check.h"
#include "aten/native/routed_call.h"

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

at::Tensor integer_histogram(
    const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  return at::histc(self.to(at::kDouble), bins, min, max).to(self.scalar_type());
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
