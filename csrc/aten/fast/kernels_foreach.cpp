// Fast kernels of the _foreach_ operators that optimizers' foreach paths call (SGD with
// momentum, Adam and AdamW). They have native kernels on device accelerators only, which run
// directly on the flagos tensor lists (FLAGOS_FAST_DIRECT: no alias per tensor); on the cpu
// accelerator the lists are aliased and CPU's kernels decompose them into per-tensor operators.
// A kernel that allocates on the native device itself (at::detail::empty_cuda) cannot be
// direct; tests/integration/test_cuda_accelerator.py runs every direct kernel against cuda.

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
    FLAGOS_FAST_DIRECT(_foreach_add_Scalar),
    FLAGOS_FAST_DIRECT(_foreach_add__Scalar),
    FLAGOS_FAST_DIRECT(_foreach_add_List),
    FLAGOS_FAST_DIRECT(_foreach_add__List),
    FLAGOS_FAST_DIRECT(_foreach_add__ScalarList),
    FLAGOS_FAST_DIRECT(_foreach_add__Tensor),
    FLAGOS_FAST_DIRECT(_foreach_sub__Scalar),
    FLAGOS_FAST_DIRECT(_foreach_sub__List),
    FLAGOS_FAST_DIRECT(_foreach_mul_Scalar),
    FLAGOS_FAST_DIRECT(_foreach_mul__Scalar),
    FLAGOS_FAST_DIRECT(_foreach_mul__List),
    FLAGOS_FAST_DIRECT(_foreach_mul__ScalarList),
    FLAGOS_FAST_DIRECT(_foreach_mul__Tensor),
    FLAGOS_FAST_DIRECT(_foreach_div_Scalar),
    FLAGOS_FAST_DIRECT(_foreach_div_ScalarList),
    FLAGOS_FAST_DIRECT(_foreach_div__Scalar),
    FLAGOS_FAST_DIRECT(_foreach_div__List),
    FLAGOS_FAST_DIRECT(_foreach_div__ScalarList),
    FLAGOS_FAST_DIRECT(_foreach_div__Tensor),
    FLAGOS_FAST_DIRECT(_foreach_addcmul__Scalar),
    FLAGOS_FAST_DIRECT(_foreach_addcmul__ScalarList),
    FLAGOS_FAST_DIRECT(_foreach_addcmul__Tensor),
    FLAGOS_FAST_DIRECT(_foreach_addcdiv__Scalar),
    FLAGOS_FAST_DIRECT(_foreach_addcdiv__ScalarList),
    FLAGOS_FAST_DIRECT(_foreach_addcdiv__Tensor),
    FLAGOS_FAST_DIRECT(_foreach_lerp__Scalar),
    FLAGOS_FAST_DIRECT(_foreach_lerp__List),
    FLAGOS_FAST_DIRECT(_foreach_sqrt),
    FLAGOS_FAST_DIRECT(_foreach_sqrt_),
    FLAGOS_FAST_DIRECT(_foreach_neg),
    FLAGOS_FAST_DIRECT(_foreach_neg_),
    FLAGOS_FAST_DIRECT(_foreach_zero_),
    FLAGOS_FAST(_foreach_norm_Scalar), // allocates with at::detail::empty_cuda: aliases only
};

} // namespace

KernelList foreach_kernels() {
  return {kKernels, std::size(kKernels)};
}

} // namespace torch_fl::fast
