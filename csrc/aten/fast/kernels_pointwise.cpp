// Fast kernels of pointwise operators (arithmetic, activations and their backwards, fills).
// An operator listed here gets a fast kernel only where the router would serve it anyway.

#include "aten/fast/fast_kernel.h"
#include "aten/fast/registry.h"

#include <ATen/ops/abs_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/bitwise_and_ops.h>
#include <ATen/ops/bitwise_not_ops.h>
#include <ATen/ops/bitwise_or_ops.h>
#include <ATen/ops/clamp_ops.h>
#include <ATen/ops/clone_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/eq_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/fill_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/gt_ops.h>
#include <ATen/ops/isneginf_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/log_ops.h>
#include <ATen/ops/lt_ops.h>
#include <ATen/ops/masked_fill_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/ne_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/reciprocal_ops.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_backward_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/where_ops.h>
#include <ATen/ops/zero_ops.h>

namespace torch_fl::fast {
namespace {

const Kernel kKernels[] = {
    FLAGOS_FAST(add_Tensor),
    FLAGOS_FAST(add__Tensor),
    FLAGOS_FAST(add_out),
    FLAGOS_FAST(sub_Tensor),
    FLAGOS_FAST(sub__Tensor),
    FLAGOS_FAST(sub_out),
    FLAGOS_FAST(mul_Tensor),
    FLAGOS_FAST(mul__Tensor),
    FLAGOS_FAST(mul_out),
    FLAGOS_FAST(div_Tensor),
    FLAGOS_FAST(div__Tensor),
    FLAGOS_FAST(div_out),
    FLAGOS_FAST(div_Tensor_mode),
    FLAGOS_FAST(neg),
    FLAGOS_FAST(abs),
    FLAGOS_FAST(exp),
    FLAGOS_FAST(log),
    FLAGOS_FAST(sqrt),
    FLAGOS_FAST(rsqrt),
    FLAGOS_FAST(reciprocal),
    FLAGOS_FAST(pow_Tensor_Scalar),
    FLAGOS_FAST(pow_Tensor_Tensor),
    FLAGOS_FAST(pow_Scalar),
    FLAGOS_FAST(relu),
    FLAGOS_FAST(relu_),
    FLAGOS_FAST(gelu),
    FLAGOS_FAST(gelu_backward),
    FLAGOS_FAST(tanh),
    FLAGOS_FAST(tanh_backward),
    FLAGOS_FAST(silu),
    FLAGOS_FAST(silu_backward),
    FLAGOS_FAST(sigmoid),
    FLAGOS_FAST(sigmoid_backward),
    FLAGOS_FAST(threshold_backward),
    FLAGOS_FAST(clamp),
    FLAGOS_FAST(eq_Tensor),
    FLAGOS_FAST(eq_Scalar),
    FLAGOS_FAST(ne_Tensor),
    FLAGOS_FAST(ne_Scalar),
    FLAGOS_FAST(lt_Tensor),
    FLAGOS_FAST(lt_Scalar),
    FLAGOS_FAST(gt_Tensor),
    FLAGOS_FAST(gt_Scalar),
    FLAGOS_FAST(bitwise_and_Tensor),
    FLAGOS_FAST(bitwise_or_Tensor),
    FLAGOS_FAST(bitwise_not),
    FLAGOS_FAST(addcmul),
    FLAGOS_FAST(addcmul_),
    FLAGOS_FAST(addcdiv),
    FLAGOS_FAST(addcdiv_),
    FLAGOS_FAST(lerp__Scalar),
    FLAGOS_FAST(lerp__Tensor),
    FLAGOS_FAST(masked_fill__Scalar),
    FLAGOS_FAST(masked_fill__Tensor),
    FLAGOS_FAST(where_self),
    FLAGOS_FAST(where_self_out),
    FLAGOS_FAST(isneginf),
    FLAGOS_FAST(fill__Scalar),
    FLAGOS_FAST(fill__Tensor),
    FLAGOS_FAST(zero_),
    FLAGOS_FAST(clone),
};

} // namespace

KernelList pointwise_kernels() {
  return {kKernels, std::size(kKernels)};
}

} // namespace torch_fl::fast
