#pragma once

// The fused LSTM and GRU cells. ATen's recurrent layers call them for every PrivateUse1 device
// (as for CUDA and XPU), but only CUDA has kernels; without a native device kernel to route to
// (the cpu accelerator, or a device build without the `cuda` route) flagos computes them from
// elementwise operators, with backward kernels that read the same workspace layout.

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace torch_fl::native {

// (hy, cy, workspace): workspace holds the four activated gates (input, forget, cell, output).
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias);

// (grad_gates, grad_cx, grad_bias); grad_bias undefined without biases.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy,
    const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx,
    const at::Tensor& cy,
    const at::Tensor& workspace,
    bool has_bias);

// (hy, workspace): workspace holds the reset, update and new gates, hx and the hidden part of
// the new gate.
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias);

// (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias);

} // namespace torch_fl::native
