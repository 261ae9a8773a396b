#pragma once

#include "macros.h"

// Zero-copy mapping of sparse COO tensors between flagos and the native device.
//
// A sparse COO tensor is a pair of dense tensors (indices, values) under a SparseTensorImpl.
// Its native counterpart is a native sparse tensor over native aliases of that pair; results
// come back the same way, their indices and values re-labelled as flagos tensors (alias.h).

#include <ATen/core/Tensor.h>

namespace torch_fl {

// A native sparse tensor over the memory of a flagos sparse COO tensor. When `resizable`, a
// kernel may grow its indices and values (sync_sparse_from_alias carries that back).
FLAGOS_API at::Tensor native_sparse_alias(const at::Tensor& flagos, bool resizable = false);

// A flagos sparse COO tensor on flagos:index over the indices and values of a native one.
FLAGOS_API at::Tensor flagos_sparse_from_native(const at::Tensor& native, c10::DeviceIndex index);

// After a kernel wrote through `alias` (an in-place or out= sparse result: kernels replace the
// indices and values rather than write into them), makes `original` describe the same sizes,
// dimensions, indices, values and coalesced flag.
FLAGOS_API void sync_sparse_from_alias(const at::Tensor& original, const at::Tensor& alias);

} // namespace torch_fl
