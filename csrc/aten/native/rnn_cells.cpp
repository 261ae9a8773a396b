#include "aten/native/rnn_cells.h"

#include "aten/native/optional_tensor.h"

#include <ATen/TensorOperators.h>
#include <ATen/TensorUtils.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/sigmoid.h>
#include <ATen/ops/tanh.h>
#include <ATen/ops/zeros_like.h>

#include <vector>

namespace torch_fl::native {
namespace {

at::Tensor with_bias(const at::Tensor& gates, const std::optional<at::Tensor>& bias) {
  return defined(bias) ? gates + *bias : gates;
}

// The argument checks of CUDA's fused cells, with torch's messages: nn.LSTMCell and nn.GRUCell
// check their inputs before calling these, direct calls of the aten operators do not (without
// the checks a wrongly shaped state or bias would broadcast, another dtype promote).
void check_cell(
    at::CheckedFrom op,
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& prev_hidden,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias,
    int64_t gates_per_cell) {
  const at::TensorArg input_arg{input_gates, "input_gates", 1};
  const at::TensorArg hidden_arg{hidden_gates, "hidden_gates", 2};
  const at::TensorArg prev_arg{prev_hidden, "prev_hidden", 3};
  at::checkDim(op, input_arg, 2);
  at::checkSameSize(op, input_arg, hidden_arg);
  const int64_t gates_size = input_gates.size(1);
  TORCH_CHECK(
      gates_size % gates_per_cell == 0,
      op,
      ": the gates' second dimension (",
      gates_size,
      ") must be a multiple of ",
      gates_per_cell);
  at::checkNumel(op, prev_arg, input_gates.size(0) * (gates_size / gates_per_cell));
  std::vector<at::TensorArg> same_type{input_arg, hidden_arg, prev_arg};
  if (defined(input_bias) || defined(hidden_bias)) {
    TORCH_CHECK(
        defined(input_bias) && defined(hidden_bias),
        op,
        ": input_bias and hidden_bias must be given together");
    const at::TensorArg input_bias_arg{*input_bias, "input_bias", 4};
    const at::TensorArg hidden_bias_arg{*hidden_bias, "hidden_bias", 5};
    at::checkDim(op, input_bias_arg, 1);
    at::checkNumel(op, input_bias_arg, gates_size);
    at::checkSameSize(op, input_bias_arg, hidden_bias_arg);
    same_type.push_back(input_bias_arg);
    same_type.push_back(hidden_bias_arg);
  }
  for (const auto& arg : same_type) {
    // CUDA's kernels read every argument as the gates' scalar type, and say so.
    TORCH_CHECK(
        arg->scalar_type() == input_gates.scalar_type(),
        "expected scalar type ",
        input_gates.scalar_type(),
        " but found ",
        arg->scalar_type());
  }
}

} // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& cx,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  check_cell("_thnn_fused_lstm_cell", input_gates, hidden_gates, cx, input_bias, hidden_bias, 4);
  const auto gates =
      with_bias(with_bias(input_gates + hidden_gates, input_bias), hidden_bias).chunk(4, 1);
  const auto in = at::sigmoid(gates[0]);
  const auto forget = at::sigmoid(gates[1]);
  const auto cell = at::tanh(gates[2]);
  const auto out = at::sigmoid(gates[3]);
  auto cy = forget * cx + in * cell;
  auto hy = out * at::tanh(cy);
  return {std::move(hy), std::move(cy), at::cat(at::TensorList({in, forget, cell, out}), 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy,
    const std::optional<at::Tensor>& grad_cy,
    const at::Tensor& cx,
    const at::Tensor& cy,
    const at::Tensor& workspace,
    bool has_bias) {
  if (!defined(grad_hy) && !defined(grad_cy)) {
    return {};
  }
  const auto gates = workspace.chunk(4, 1);
  const auto& in = gates[0];
  const auto& forget = gates[1];
  const auto& cell = gates[2];
  const auto& out = gates[3];
  const auto tanh_cy = at::tanh(cy);
  // The cell state's gradient: its own, plus what flows back through hy = out * tanh(cy).
  at::Tensor grad_c = defined(grad_cy) ? *grad_cy : at::zeros_like(cy);
  at::Tensor grad_out = at::zeros_like(out);
  if (defined(grad_hy)) {
    grad_c = grad_c + *grad_hy * out * (1 - tanh_cy * tanh_cy);
    grad_out = *grad_hy * tanh_cy * out * (1 - out);
  }
  const auto grad_in = grad_c * cell * in * (1 - in);
  const auto grad_forget = grad_c * cx * forget * (1 - forget);
  const auto grad_cell = grad_c * in * (1 - cell * cell);
  auto grad_gates = at::cat(at::TensorList({grad_in, grad_forget, grad_cell, grad_out}), 1);
  auto grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {std::move(grad_gates), grad_c * forget, std::move(grad_bias)};
}

std::tuple<at::Tensor, at::Tensor> fused_gru_cell(
    const at::Tensor& input_gates,
    const at::Tensor& hidden_gates,
    const at::Tensor& hx,
    const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  check_cell("_thnn_fused_gru_cell", input_gates, hidden_gates, hx, input_bias, hidden_bias, 3);
  const auto i = with_bias(input_gates, input_bias).chunk(3, 1);
  const auto h = with_bias(hidden_gates, hidden_bias).chunk(3, 1);
  const auto reset = at::sigmoid(i[0] + h[0]);
  const auto update = at::sigmoid(i[1] + h[1]);
  const auto& hidden_new = h[2];
  const auto fresh = at::tanh(i[2] + reset * hidden_new);
  auto hy = fresh + update * (hx - fresh);
  return {std::move(hy), at::cat(at::TensorList({reset, update, fresh, hx, hidden_new}), 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  const auto saved = workspace.chunk(5, 1);
  const auto& reset = saved[0];
  const auto& update = saved[1];
  const auto& fresh = saved[2];
  const auto& hx = saved[3];
  const auto& hidden_new = saved[4];
  // hy = fresh + update * (hx - fresh), fresh = tanh(i_n + reset * h_n).
  const auto grad_update = grad_hy * (hx - fresh) * update * (1 - update);
  const auto grad_fresh_in = grad_hy * (1 - update) * (1 - fresh * fresh);
  const auto grad_reset = grad_fresh_in * hidden_new * reset * (1 - reset);
  auto grad_input_gates = at::cat(at::TensorList({grad_reset, grad_update, grad_fresh_in}), 1);
  auto grad_hidden_gates =
      at::cat(at::TensorList({grad_reset, grad_update, grad_fresh_in * reset}), 1);
  auto grad_input_bias = has_bias ? grad_input_gates.sum(0) : at::Tensor();
  auto grad_hidden_bias = has_bias ? grad_hidden_gates.sum(0) : at::Tensor();
  return {
      std::move(grad_input_gates),
      std::move(grad_hidden_gates),
      grad_hy * update,
      std::move(grad_input_bias),
      std::move(grad_hidden_bias)};
}

} // namespace torch_fl::native
