// Fast kernels of matrix products, reductions, softmax, losses, normalisation, indexing and cat:
// the hot operators of a transformer's forward and backward besides the pointwise ones, and the
// small ones transformers' masking, position and generation code calls every step (arange,
// tril, any/all, max, cumsum, isin), and the fused attention kernels SDPA picks (each has a
// native kernel on one accelerator only; elsewhere the entry stays on the boxed router).

#include "aten/fast/fast_kernel.h"
#include "aten/fast/registry.h"

#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_cudnn_attention_ops.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_efficient_attention_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/all_ops.h>
#include <ATen/ops/amax_ops.h>
#include <ATen/ops/any_ops.h>
#include <ATen/ops/arange_ops.h>
#include <ATen/ops/argmax_ops.h>
#include <ATen/ops/baddbmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/cat_ops.h>
#include <ATen/ops/cumsum_ops.h>
#include <ATen/ops/embedding_dense_backward_ops.h>
#include <ATen/ops/gather_ops.h>
#include <ATen/ops/index_ops.h>
#include <ATen/ops/index_select_ops.h>
#include <ATen/ops/isin_ops.h>
#include <ATen/ops/max_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_layer_norm_backward_ops.h>
#include <ATen/ops/native_layer_norm_ops.h>
#include <ATen/ops/nll_loss_backward_ops.h>
#include <ATen/ops/nll_loss_forward_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tril_ops.h>

namespace torch_fl::fast {
namespace {

const Kernel kKernels[] = {
    FLAGOS_FAST(mm),
    FLAGOS_FAST(mm_out),
    FLAGOS_FAST(addmm),
    FLAGOS_FAST(addmm_),
    FLAGOS_FAST(addmm_out),
    FLAGOS_FAST(bmm),
    FLAGOS_FAST(baddbmm),
    FLAGOS_FAST(sum_dim_IntList),
    FLAGOS_FAST(mean_dim),
    FLAGOS_FAST(amax),
    FLAGOS_FAST(argmax),
    FLAGOS_FAST(_softmax),
    FLAGOS_FAST(_softmax_backward_data),
    FLAGOS_FAST(_log_softmax),
    FLAGOS_FAST(_log_softmax_backward_data),
    FLAGOS_FAST(nll_loss_forward),
    FLAGOS_FAST(nll_loss_backward),
    FLAGOS_FAST(native_layer_norm),
    FLAGOS_FAST(native_layer_norm_backward),
    FLAGOS_FAST(native_dropout_backward),
    FLAGOS_FAST(embedding_dense_backward),
    FLAGOS_FAST(index_Tensor),
    FLAGOS_FAST(index_select),
    FLAGOS_FAST(gather),
    FLAGOS_FAST(cat),
    FLAGOS_FAST(cat_out),
    FLAGOS_FAST(arange_start_out),
    FLAGOS_FAST(tril),
    FLAGOS_FAST(all_dim),
    FLAGOS_FAST(all),
    FLAGOS_FAST(any),
    FLAGOS_FAST(any_dim),
    FLAGOS_FAST(max),
    FLAGOS_FAST(cumsum),
    FLAGOS_FAST(isin_Tensor_Tensor),
    FLAGOS_FAST(_scaled_dot_product_efficient_attention),
    FLAGOS_FAST(_scaled_dot_product_efficient_attention_backward),
    FLAGOS_FAST(_scaled_dot_product_cudnn_attention),
    FLAGOS_FAST(_scaled_dot_product_cudnn_attention_backward),
    FLAGOS_FAST(_scaled_dot_product_flash_attention_for_cpu),
    FLAGOS_FAST(_scaled_dot_product_flash_attention_for_cpu_backward),
};

} // namespace

KernelList nn_kernels() {
  return {kKernels, std::size(kKernels)};
}

} // namespace torch_fl::fast
