#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>

namespace torch_fl::native {

// histc where flagos runs CPU's kernels (builds without boxing). CUDA's histc counts integer
// tensors and CPU's refuses them ("histogram_cpu" not implemented for 'Int'); code written for
// a GPU passes them (transformers' MoE routing does for every device but cpu and mps). An
// integer histogram is counted over a float64 copy, whose bin arithmetic is exact for such
// integers, and returned in the input's dtype, as CUDA's; floating inputs take the routed path.
at::Tensor histc(
    const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max);
at::Tensor& histc_out(
    const at::Tensor& self,
    int64_t bins,
    const at::Scalar& min,
    const at::Scalar& max,
    at::Tensor& out);

} // namespace torch_fl::native
