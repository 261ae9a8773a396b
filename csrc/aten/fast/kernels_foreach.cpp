// Fast kernels of the _foreach_ operators that optimizers' foreach paths call (SGD with
// momentum, Adam and AdamW). They have native kernels on device accelerators only; on the cpu
// accelerator they decompose into per-tensor operators (which have fast kernels of their own).

#include "aten/fast/fast_kernel.h"
#include "aten/fast/registry.h"

#include <ATen/ops/_foreach_add_ops.h>
#include <ATen/ops/_foreach_addcdiv_ops.h>
#include <ATen/ops/_foreach_addcmul_ops.h>
#include <ATen/ops/_foreach_div_ops.h>
#include <ATen/ops/_foreach_lerp_ops.h>
#include <ATen/ops/_foreach_mul_ops.h>
#include <ATen/ops/_foreach_neg_ops.h>
#include <ATen/ops/_foreach_norm_ops.h>
#include <ATen/ops/_foreach_sqrt_ops.h>
#include <ATen/ops/_foreach_sub_ops.h>
#include <ATen/ops/_foreach_zero_ops.h>

namespace torch_fl::fast {
namespace {

const Kernel kKernels[] = {
    FLAGOS_FAST(_foreach_add_Scalar),
    FLAGOS_FAST(_foreach_add__Scalar),
    FLAGOS_FAST(_foreach_add_List),
    FLAGOS_FAST(_foreach_add__List),
    FLAGOS_FAST(_foreach_add__ScalarList),
    FLAGOS_FAST(_foreach_add__Tensor),
    FLAGOS_FAST(_foreach_sub__Scalar),
    FLAGOS_FAST(_foreach_sub__List),
    FLAGOS_FAST(_foreach_mul_Scalar),
    FLAGOS_FAST(_foreach_mul__Scalar),
    FLAGOS_FAST(_foreach_mul__List),
    FLAGOS_FAST(_foreach_mul__ScalarList),
    FLAGOS_FAST(_foreach_mul__Tensor),
    FLAGOS_FAST(_foreach_div_Scalar),
    FLAGOS_FAST(_foreach_div_ScalarList),
    FLAGOS_FAST(_foreach_div__Scalar),
    FLAGOS_FAST(_foreach_div__List),
    FLAGOS_FAST(_foreach_div__ScalarList),
    FLAGOS_FAST(_foreach_div__Tensor),
    FLAGOS_FAST(_foreach_addcmul__Scalar),
    FLAGOS_FAST(_foreach_addcmul__ScalarList),
    FLAGOS_FAST(_foreach_addcmul__Tensor),
    FLAGOS_FAST(_foreach_addcdiv__Scalar),
    FLAGOS_FAST(_foreach_addcdiv__ScalarList),
    FLAGOS_FAST(_foreach_addcdiv__Tensor),
    FLAGOS_FAST(_foreach_lerp__Scalar),
    FLAGOS_FAST(_foreach_lerp__List),
    FLAGOS_FAST(_foreach_sqrt),
    FLAGOS_FAST(_foreach_sqrt_),
    FLAGOS_FAST(_foreach_neg),
    FLAGOS_FAST(_foreach_neg_),
    FLAGOS_FAST(_foreach_zero_),
    FLAGOS_FAST(_foreach_norm_Scalar),
};

} // namespace

KernelList foreach_kernels() {
  return {kKernels, std::size(kKernels)};
}

} // namespace torch_fl::fast
