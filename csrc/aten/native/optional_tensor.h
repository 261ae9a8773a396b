#pragma once

// Tensor? arguments of the kernels flagos implements itself: present and defined.

#include <ATen/core/Tensor.h>

#include <optional>

namespace torch_fl::native {

inline bool defined(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined();
}

} // namespace torch_fl::native
