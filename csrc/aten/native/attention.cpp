#include "aten/native/attention.h"

#include "aten/alias.h"
#include "aten/nested/nested_alias.h"
#include "runtime/accelerator.h"

#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_backward_ops.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_ops.h>

namespace torch_fl::native {
namespace {

// Tensors without real flagos memory behind them (FakeTensor while torch.compile traces,
// functional wrappers) cannot be aliased to the native device.
bool has_real_memory(const at::Tensor& t) {
  // Functionality keys only: a backend key here would match every dense tensor.
  constexpr auto kWrapperKeys =
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::Functionalize});
  return t.has_storage() && !t.key_set().has_any(kWrapperKeys);
}

bool has_symbolic_shape(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->has_symbolic_sizes_strides();
}

// A native-typed tensor with `t`'s dtype, sizes, strides, device index and requires_grad, and
// no memory: all the native choice function reads. Stands in for a tensor without real memory
// (a fake tensor while torch.compile traces), which cannot be aliased.
at::Tensor metadata_twin(const at::Tensor& t) {
  auto& accel = accelerator();
  auto storage = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(),
      0,
      c10::DataPtr(nullptr, accel.native_device(t.device().index())),
      nullptr,
      /*resizable=*/false);
  auto twin = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(std::move(storage)),
      c10::DispatchKeySet(accel.native_dispatch_key()),
      t.dtype());
  twin.unsafeGetTensorImpl()->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  if (t.requires_grad()) {
    twin.set_requires_grad(true);
  }
  return twin;
}

bool head_dims_multiple_of_8(const at::Tensor& query, const at::Tensor& value) {
  return query.size(-1) % 8 == 0 && value.size(-1) % 8 == 0;
}

} // namespace

// Without this entry SDPA always runs the unfused math path on flagos (dozens of operators and
// the full attention matrix). The native device decides here as it would for its own tensors;
// one answer needs adjusting: SDPA runs "flash" on a non-native device through its CPU
// variant, so on a device accelerator flash is reached through the overrideable backend below
// (which calls the native flash kernels). Flash inputs whose head dimension needs padding go
// to math, as SDPA pads only for the native device. While torch.compile traces, the inputs are
// fake: the choice is made on memory-less twins of them (so compiled code calls the same fused
// kernel as eager), or is math when their shapes are symbolic.
int64_t fused_sdp_choice(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  const bool mask = attn_mask.has_value() && attn_mask->defined();
  const bool real = has_real_memory(query) && has_real_memory(key) && has_real_memory(value) &&
                    (!mask || has_real_memory(*attn_mask));
  // (A memory-less nested tensor has no strides to copy into a twin.)
  if (!real && (query.is_nested() || has_symbolic_shape(query) || has_symbolic_shape(key) ||
                has_symbolic_shape(value) || (mask && has_symbolic_shape(*attn_mask)))) {
    return static_cast<int64_t>(at::SDPBackend::math);
  }
  // requires_grad travels along: the native choice avoids kernels that cannot differentiate
  // what needs a gradient (CPU's flash kernel and an attention mask, for one).
  const auto as_native = [real](const at::Tensor& t) {
    if (!real) {
      return metadata_twin(t);
    }
    auto alias = t.is_nested() ? native_nested_alias(t) : native_alias(t);
    if (t.requires_grad()) {
      alias.set_requires_grad(true);
    }
    return alias;
  };
  DeviceScope scope(query.device().index());
  at::Tensor q = as_native(query);
  at::Tensor k = as_native(key);
  at::Tensor v = as_native(value);
  std::optional<at::Tensor> m =
      mask ? std::optional<at::Tensor>(as_native(*attn_mask)) : std::nullopt;
  // Straight to the native kernel, as SDPA reaches its stub for native tensors: a full
  // dispatcher call would add an operator (and a profiler event) per attention.
  const auto choice = at::_ops::_fused_sdp_choice::redispatch(
      c10::DispatchKeySet(accelerator().native_dispatch_key()),
      q,
      k,
      v,
      m,
      dropout_p,
      is_causal,
      scale,
      enable_gqa);
  if (real) { // the choice only read them: the aliases go back to this thread's pool
    for (at::Tensor* alias : {&q, &k, &v}) {
      release_alias(*alias); // (one given requires_grad is not pooled: it has autograd state)
    }
    if (m.has_value()) {
      release_alias(*m);
    }
  }
  const bool device_accelerator = accelerator().native_device_type() != c10::DeviceType::CPU;
  if (device_accelerator && choice == static_cast<int64_t>(at::SDPBackend::flash_attention)) {
    // The overrideable backend takes dense inputs only.
    return static_cast<int64_t>(
        head_dims_multiple_of_8(query, value) && !query.is_nested() ? at::SDPBackend::overrideable
                                                                    : at::SDPBackend::math);
  }
  return choice;
}

FlashOutputs fused_attention_overrideable(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_bias,
    double dropout_p,
    bool is_causal,
    bool return_debug_mask,
    std::optional<double> scale) {
  TORCH_CHECK(
      !(attn_bias.has_value() && attn_bias->defined()),
      "flagos: _scaled_dot_product_fused_attention_overrideable runs the native flash-attention "
      "kernel, which takes no attention mask; scaled_dot_product_attention only picks it for "
      "inputs without one");
  DeviceScope scope(query.device().index());
  auto [out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug] =
      at::_ops::_scaled_dot_product_flash_attention::call(
          native_alias(query),
          native_alias(key),
          native_alias(value),
          dropout_p,
          is_causal,
          return_debug_mask,
          scale);
  // The philox seed and offset may be host tensors (the kernel's choice): they stay as they are.
  ResultRelabeler to_flagos(query.device().index(), accelerator().native_device_type());
  return {
      to_flagos(std::move(out)),
      to_flagos(std::move(lse)),
      to_flagos(std::move(cum_q)),
      to_flagos(std::move(cum_k)),
      std::move(max_q),
      std::move(max_k),
      to_flagos(std::move(seed)),
      to_flagos(std::move(offset)),
      to_flagos(std::move(debug))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_attention_overrideable_backward(
    const at::Tensor& grad_out,
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const at::Tensor& attn_bias,
    std::array<bool, 4> grad_input_mask,
    const at::Tensor& out,
    const at::Tensor& logsumexp,
    const at::Tensor& cum_seq_q,
    const at::Tensor& cum_seq_k,
    c10::SymInt max_q,
    c10::SymInt max_k,
    double dropout_p,
    bool is_causal,
    const at::Tensor& philox_seed,
    const at::Tensor& philox_offset,
    std::optional<double> scale) {
  DeviceScope scope(query.device().index());
  const auto alias = [](const at::Tensor& t) { return t.defined() ? native_alias(t) : t; };
  auto [grad_q, grad_k, grad_v] = at::_ops::_scaled_dot_product_flash_attention_backward::call(
      native_alias(grad_out),
      native_alias(query),
      native_alias(key),
      native_alias(value),
      native_alias(out),
      native_alias(logsumexp),
      alias(cum_seq_q),
      alias(cum_seq_k),
      std::move(max_q),
      std::move(max_k),
      dropout_p,
      is_causal,
      alias(philox_seed),
      alias(philox_offset),
      scale);
  ResultRelabeler to_flagos(query.device().index(), accelerator().native_device_type());
  return {
      to_flagos(std::move(grad_q)),
      to_flagos(std::move(grad_k)),
      to_flagos(std::move(grad_v)),
      at::Tensor()};
}

} // namespace torch_fl::native

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_fl::native::fused_sdp_choice)
} // namespace at::native
