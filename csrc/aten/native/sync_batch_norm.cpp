#include "aten/native/sync_batch_norm.h"

#include "aten/native/optional_tensor.h"

#include <ATen/AccumulateType.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/full.h>
#include <ATen/ops/var_mean.h>

#include <vector>

namespace torch_fl::native {
namespace {

// The type CUDA's kernels accumulate in: float for half and bfloat16, else the type itself.
at::ScalarType accumulate_type(const at::Tensor& input) {
  return at::toAccumulateType(input.scalar_type(), /*is_cuda=*/true);
}

// Every dimension but the channels (dimension 1).
std::vector<int64_t> reduced_dims(const at::Tensor& input) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < input.dim(); ++d) {
    if (d != 1) {
      dims.push_back(d);
    }
  }
  return dims;
}

// A per-channel vector shaped to broadcast against `input` ([1, C, 1, ...]).
at::Tensor per_channel(const at::Tensor& values, const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = values.numel();
  return values.reshape(shape);
}

} // namespace

std::tuple<at::Tensor, at::Tensor> batch_norm_stats(const at::Tensor& input, double eps) {
  TORCH_CHECK(input.dim() >= 2, "batch_norm_stats: expected an input with a channel dimension");
  const auto x = input.to(accumulate_type(input));
  auto [var, mean] = at::var_mean(x, reduced_dims(x), /*correction=*/at::Scalar(0), false);
  return {std::move(mean), (var + eps).rsqrt()};
}

std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats_with_counts(
    const at::Tensor& /*input*/,
    const at::Tensor& mean,
    const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var,
    double momentum,
    double eps,
    const at::Tensor& counts) {
  // Chan et al.'s merge of per-rank (count, mean, variance), as CUDA's kernel does per channel.
  const auto weights = counts.to(mean.scalar_type()).reshape({-1, 1});
  const auto total = weights.sum();
  auto global_mean = (mean * weights).sum(0) / total;
  const auto rank_var = invstd.pow(-2) - eps;
  const auto squares = (rank_var * weights).sum(0) + ((mean - global_mean).pow(2) * weights).sum(0);
  auto global_invstd = (squares / total + eps).rsqrt();
  if (defined(running_mean)) {
    running_mean->copy_(*running_mean * (1 - momentum) + global_mean * momentum);
  }
  if (defined(running_var)) {
    running_var->copy_(*running_var * (1 - momentum) + squares / (total - 1) * momentum);
  }
  return {std::move(global_mean), std::move(global_invstd)};
}

std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats(
    const at::Tensor& input,
    const at::Tensor& mean,
    const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var,
    double momentum,
    double eps,
    int64_t count) {
  const auto counts = at::full({mean.size(0)}, count, mean.options());
  return native::batch_norm_gather_stats_with_counts(
      input, mean, invstd, running_mean, running_var, momentum, eps, counts);
}

at::Tensor batch_norm_elemt(
    const at::Tensor& input,
    const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias,
    const at::Tensor& mean,
    const at::Tensor& invstd,
    double /*eps*/) {
  const auto acc = accumulate_type(input);
  auto out = (input.to(acc) - per_channel(mean, input)) * per_channel(invstd, input);
  if (defined(weight)) {
    out = out * per_channel(weight->to(acc), input);
  }
  if (defined(bias)) {
    out = out + per_channel(bias->to(acc), input);
  }
  return out.to(input.scalar_type());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_reduce(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& mean,
    const at::Tensor& invstd,
    const std::optional<at::Tensor>& weight,
    bool input_g,
    bool weight_g,
    bool bias_g) {
  const auto acc = accumulate_type(input);
  const auto dims = reduced_dims(input);
  const auto dy = grad_out.to(acc);
  auto sum_dy = dy.sum(dims);
  auto sum_dy_xmu = (dy * (input.to(acc) - per_channel(mean, input))).sum(dims);
  const auto param_type = defined(weight) ? weight->scalar_type() : input.scalar_type();
  auto grad_weight = weight_g ? (sum_dy_xmu * invstd).to(param_type) : at::Tensor();
  auto grad_bias = bias_g ? sum_dy.to(param_type) : at::Tensor();
  if (!input_g) {
    return {at::Tensor(), at::Tensor(), std::move(grad_weight), std::move(grad_bias)};
  }
  return {std::move(sum_dy), std::move(sum_dy_xmu), std::move(grad_weight), std::move(grad_bias)};
}

at::Tensor batch_norm_backward_elemt(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& mean,
    const at::Tensor& invstd,
    const std::optional<at::Tensor>& weight,
    const at::Tensor& sum_dy,
    const at::Tensor& sum_dy_xmu,
    const at::Tensor& count) {
  const auto acc = accumulate_type(input);
  const auto norm = count.to(acc).sum().reciprocal(); // 1 / the global batch count
  const auto istd = per_channel(invstd, input);
  const auto mean_dy = per_channel(sum_dy, input) * norm;
  const auto projection = per_channel(sum_dy_xmu, input) * norm * istd * istd;
  const auto scale = defined(weight) ? istd * per_channel(weight->to(acc), input) : istd;
  const auto xmu = input.to(acc) - per_channel(mean, input);
  return ((grad_out.to(acc) - mean_dy - xmu * projection) * scale).to(input.scalar_type());
}

} // namespace torch_fl::native
