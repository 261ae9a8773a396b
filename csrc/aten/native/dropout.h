#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace torch_fl::native {

// native_dropout drawing its mask from the flagos generator of the input's device. The CPU
// kernel takes no generator argument and would draw from the CPU's default generator.
std::tuple<at::Tensor, at::Tensor> native_dropout(
    const at::Tensor& input, double p, std::optional<bool> train);

} // namespace torch_fl::native
