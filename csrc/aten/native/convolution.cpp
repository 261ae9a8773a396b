#include "aten/native/convolution.h"

#include "aten/alias.h"
#include "aten/device_check.h"
#include "runtime/accelerator.h"

#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>

#include <initializer_list>
#include <utility>
#include <vector>

namespace torch_fl::native {
namespace {

// torch's fake tensors (torch.compile, export) predict a contiguous result for a PrivateUse1
// convolution and its gradients (ATen's backend selection says Overrideable, whose memory
// format is contiguous), while CPU's and cuDNN's kernels answer channels-last when the input
// or the weight is. Compiled code asserts the predicted strides, so the native kernels get
// contiguous operands and return contiguous results, as predicted.
at::Tensor contiguous_native(const at::Tensor& flagos) {
  return native_alias(flagos).contiguous(); // the alias itself when already contiguous
}

// ATen sends a convolution here by its input's device alone and checks the other operands'
// devices only on its own backends' paths, so a CPU weight (a module not moved) or one on
// another flagos device must be refused here, as CUDA refuses it, before any alias is made.
void check_same_device(
    const char* op,
    const at::Tensor& input,
    std::initializer_list<std::pair<const char*, const at::Tensor*>> others) {
  for (const auto& [name, tensor] : others) {
    if (tensor != nullptr && tensor->defined() && tensor->device() != input.device()) {
      fail_mixed_devices(
          input.device(),
          tensor->device(),
          name,
          op,
          "; move the module to the input's device, e.g. module.to(\"" + input.device().str() +
              "\")");
    }
  }
}

const at::Tensor* optional_ptr(const std::optional<at::Tensor>& t) {
  return t.has_value() ? &*t : nullptr;
}

} // namespace

at::Tensor convolution_overrideable(
    const at::Tensor& input,
    const at::Tensor& weight,
    const std::optional<at::Tensor>& bias,
    at::IntArrayRef stride,
    at::IntArrayRef padding,
    at::IntArrayRef dilation,
    bool transposed,
    at::IntArrayRef output_padding,
    int64_t groups) {
  check_same_device(
      "aten::convolution_overrideable", input, {{"weight", &weight}, {"bias", optional_ptr(bias)}});
  DeviceScope scope(input.device().index());
  std::optional<at::Tensor> native_bias;
  if (bias.has_value() && bias->defined()) {
    native_bias = native_alias(*bias);
  }
  auto out = at::convolution(
      contiguous_native(input),
      contiguous_native(weight),
      native_bias,
      stride,
      padding,
      dilation,
      transposed,
      output_padding,
      groups);
  ResultRelabeler to_flagos(input.device().index(), accelerator().native_device_type());
  return to_flagos(std::move(out));
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    const at::Tensor& weight,
    at::OptionalIntArrayRef bias_sizes,
    at::IntArrayRef stride,
    at::IntArrayRef padding,
    at::IntArrayRef dilation,
    bool transposed,
    at::IntArrayRef output_padding,
    int64_t groups,
    std::array<bool, 3> output_mask) {
  check_same_device(
      "aten::convolution_backward", input, {{"grad_output", &grad_output}, {"weight", &weight}});
  DeviceScope scope(input.device().index());
  auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
      contiguous_native(grad_output),
      contiguous_native(input),
      contiguous_native(weight),
      bias_sizes,
      stride,
      padding,
      dilation,
      transposed,
      output_padding,
      groups,
      output_mask);
  ResultRelabeler to_flagos(input.device().index(), accelerator().native_device_type());
  return {
      to_flagos(std::move(grad_input)),
      to_flagos(std::move(grad_weight)),
      to_flagos(std::move(grad_bias))};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    const at::Tensor& weight,
    at::IntArrayRef stride,
    at::IntArrayRef padding,
    at::IntArrayRef dilation,
    bool transposed,
    at::IntArrayRef output_padding,
    int64_t groups,
    std::array<bool, 3> output_mask) {
  // The bias has one entry per output channel.
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  const std::vector<int64_t> bias_sizes{out_channels};
  return native::convolution_backward(
      grad_output,
      input,
      weight,
      output_mask[2] ? at::OptionalIntArrayRef(bias_sizes) : std::nullopt,
      stride,
      padding,
      dilation,
      transposed,
      output_padding,
      groups,
      output_mask);
}

} // namespace torch_fl::native
