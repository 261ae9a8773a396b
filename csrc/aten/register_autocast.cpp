// Autocast on flagos: the same per-operator policy as CUDA autocast (PyTorch's shared op lists),
// registered on the AutocastPrivateUse1 key. Native CUDA and CPU tensors keep their own keys, so
// flagos autocast never leaks onto them.

#include "aten/native/fused_layers_autocast.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/_native_multi_head_attention_ops.h>
#include <ATen/ops/_transformer_encoder_layer_fwd_ops.h>
#include <torch/library.h>

namespace torch_fl {
namespace {

// PyTorch's shared op lists name ATen types unqualified, and which types differs by version.
using namespace at; // NOLINT(google-build-using-namespace)

at::Tensor binary_cross_entropy_banned(
    const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(
      false,
      "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
      "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
      "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_"
      "logits\nor torch.nn.BCEWithLogitsLoss. binary_cross_entropy_with_logits and "
      "BCEWithLogits are\nsafe to autocast.");
}

// Operators without a policy run unchanged.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define FLAGOS_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(FLAGOS_LOWER_PRECISION_FP)
#undef FLAGOS_LOWER_PRECISION_FP

#define FLAGOS_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(FLAGOS_FP32)
#undef FLAGOS_FP32

#define FLAGOS_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(FLAGOS_FP32_SET_OPT_DTYPE)
#undef FLAGOS_FP32_SET_OPT_DTYPE

  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

#define FLAGOS_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(FLAGOS_PROMOTE)
#undef FLAGOS_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN(binary_cross_entropy_banned));

  m.impl(
      TORCH_SELECTIVE_NAME("aten::_native_multi_head_attention"),
      TORCH_FN(native::FusedLayerAutocast<at::_ops::_native_multi_head_attention>::run));
  m.impl(
      TORCH_SELECTIVE_NAME("aten::_transformer_encoder_layer_fwd"),
      TORCH_FN(native::FusedLayerAutocast<at::_ops::_transformer_encoder_layer_fwd>::run));
}

} // namespace
} // namespace torch_fl
