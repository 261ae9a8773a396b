#pragma once

// Autocast of the fused inference kernels of torch.nn's transformer modules
// (_native_multi_head_attention, _transformer_encoder_layer_fwd).
//
// MultiheadAttention, TransformerEncoderLayer and TransformerEncoder take these kernels only
// when `torch.is_autocast_enabled()` is false, and that reads CUDA's autocast state alone. So
// under CUDA's autocast they run the unfused ("slow") path, while under CPU's, and under
// flagos's, they take the fused kernels. CUDA's fused kernels cannot autocast inside (a bf16
// projection meets a float32 bias: "expected scalar type BFloat16 but found Float"), CPU's can.
// On an accelerator whose native device is CUDA the fused kernel therefore runs with autocast
// off, and its results take the dtypes the slow path returns under CUDA's autocast; elsewhere
// it runs as the native device runs it (the inner operators follow flagos's autocast,
// AutocastAsFlagos).

#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <tuple>
#include <utility>

namespace torch_fl::native {

// True where the native device's own modules skip the fused kernels under its autocast.
bool native_modules_skip_fused_layers_under_autocast();

// The slow path's attention output is an out_proj linear: in the autocast dtype.
inline void as_slow_path_results(std::tuple<at::Tensor, at::Tensor>& mha) {
  at::Tensor& out = std::get<0>(mha);
  if (out.defined() && out.scalar_type() == at::kFloat) {
    out = out.to(at::autocast::get_autocast_dtype(c10::DeviceType::PrivateUse1));
  }
}
// The encoder layer's output comes from a float32 layer norm or a float32 residual add.
inline void as_slow_path_results(at::Tensor&) {}

template <class Op, class Sig = typename Op::schema>
struct FusedLayerAutocast;

template <class Op, class R, class... Args>
struct FusedLayerAutocast<Op, R(Args...)> {
  static R run(c10::DispatchKeySet keys, Args... args) {
    const auto below =
        keys &
        c10::DispatchKeySet(c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::AutocastPrivateUse1);
    if (!native_modules_skip_fused_layers_under_autocast()) {
      return Op::redispatch(below, std::forward<Args>(args)...);
    }
    R result = [&] {
      c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::DispatchKey::AutocastPrivateUse1);
      return Op::redispatch(below, std::forward<Args>(args)...);
    }();
    as_slow_path_results(result);
    return result;
  }
};

} // namespace torch_fl::native
