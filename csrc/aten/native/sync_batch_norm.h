#pragma once

// The per-channel statistics kernels of nn.SyncBatchNorm (torch/nn/modules/_functions.py).
// torch accepts SyncBatchNorm on PrivateUse1 devices, but only CUDA has these kernels; without a
// native device kernel to route to (the cpu accelerator, or a device build without the `cuda`
// route) flagos computes them from reductions and elementwise operators, with CUDA's formulas:
// statistics in the accumulate type (float for half and bfloat16 inputs), outputs in the
// input's dtype.

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace torch_fl::native {

// (mean, invstd) per channel (dimension 1) over every other dimension.
std::tuple<at::Tensor, at::Tensor> batch_norm_stats(const at::Tensor& input, double eps);

// Combines the ranks' (mean, invstd) rows, weighted by `counts`, into the global ones, and
// updates the running statistics (unbiased variance) in place.
std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats_with_counts(
    const at::Tensor& input,
    const at::Tensor& mean,
    const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var,
    double momentum,
    double eps,
    const at::Tensor& counts);

std::tuple<at::Tensor, at::Tensor> batch_norm_gather_stats(
    const at::Tensor& input,
    const at::Tensor& mean,
    const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var,
    double momentum,
    double eps,
    int64_t count);

// (input - mean) * invstd * weight + bias, per channel.
at::Tensor batch_norm_elemt(
    const at::Tensor& input,
    const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias,
    const at::Tensor& mean,
    const at::Tensor& invstd,
    double eps);

// (sum_dy, sum_dy_xmu, grad_weight, grad_bias); each undefined unless asked for.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batch_norm_backward_reduce(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& mean,
    const at::Tensor& invstd,
    const std::optional<at::Tensor>& weight,
    bool input_g,
    bool weight_g,
    bool bias_g);

// The input's gradient from the globally reduced sums; `count` holds every rank's batch count.
at::Tensor batch_norm_backward_elemt(
    const at::Tensor& grad_out,
    const at::Tensor& input,
    const at::Tensor& mean,
    const at::Tensor& invstd,
    const std::optional<at::Tensor>& weight,
    const at::Tensor& sum_dy,
    const at::Tensor& sum_dy_xmu,
    const at::Tensor& count);

} // namespace torch_fl::native
