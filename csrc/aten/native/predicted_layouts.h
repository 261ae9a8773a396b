#pragma once

// Results laid out as torch's fake tensors predict them for a device other than the CPU, where
// flagos runs CPU's kernels (builds without boxing). Compiled and exported code takes its
// strides from those predictions, which follow CUDA's kernels; CPU's kernels lay some results
// out otherwise, so eager flagos and its compiled form would disagree (an exported
// `nonzero_static(x, size=n).view(-1)` failed at export although eager flagos ran it).
// Convolution's counterpart is in convolution.cpp.

#include "aten/native/routed_call.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_strided.h>

#include <utility>

namespace torch_fl::native {

// nonzero_static: (size, ndim) indices in column-major order, as CUDA's kernel writes them.
template <class Op, class Sig = typename Op::schema>
struct ColumnMajorIndices;

template <class Op, class... Args>
struct ColumnMajorIndices<Op, at::Tensor(Args...)> {
  static at::Tensor run(Args... args) {
    const at::Tensor rows = Routed<Op>::call(std::forward<Args>(args)...);
    if (rows.dim() != 2) {
      return rows;
    }
    at::Tensor columns = at::empty_strided(rows.sizes(), {1, rows.size(0)}, rows.options());
    return columns.copy_(rows);
  }
};

} // namespace torch_fl::native
