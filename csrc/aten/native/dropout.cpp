#include "aten/native/dropout.h"

#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>

namespace torch_fl::native {

// The same arithmetic as ATen's CPU kernel, so masks and scaling match it exactly; bernoulli_
// runs through the router, which hands the kernel the flagos default generator.
std::tuple<at::Tensor, at::Tensor> native_dropout(
    const at::Tensor& input, double p, std::optional<bool> train) {
  if (input.numel() == 0) {
    return {input, at::empty_like(input, input.options())};
  }
  if (train.has_value() && !*train) {
    return {input.clone(), at::ones_like(input, input.options().dtype(c10::kBool))};
  }
  // CUDA's kernel dispatches floating types only and refuses complex inputs, as this does (CPU's
  // accepts them at this level; F.dropout refuses complex on both before reaching it).
  TORCH_CHECK_NOT_IMPLEMENTED(
      !input.is_complex(), "\"native_dropout\" not implemented for '", input.scalar_type(), "'");
  const double keep = 1. - p;
  const double scale = keep == 0 ? 0. : 1. / keep;
  // A bool mask in the input's layout, as CUDA's kernel and recent CPU ones make it (and as the
  // meta kernel tells torch.compile); the layout also fixes the order of the draws.
  at::Tensor mask = at::empty_like(input, input.options().dtype(c10::kBool));
  mask.bernoulli_(keep);
  at::Tensor output = input.mul(mask).mul_(scale);
  return {output, mask};
}

} // namespace torch_fl::native
