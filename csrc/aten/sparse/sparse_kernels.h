#pragma once

#include "macros.h"

namespace torch_fl {

// Registers the aliased sparse kernel (register_sparse.cpp) at SparsePrivateUse1 for every
// operator that has a sparse kernel on the native device. Once per process; called when the
// routing table loads, after torch has registered its operators.
FLAGOS_API void register_sparse_kernels();

} // namespace torch_fl
