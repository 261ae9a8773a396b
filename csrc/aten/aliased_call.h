#pragma once

#include "macros.h"

// Runs an operator's native kernel on zero-copy aliases of its flagos arguments.
//
// Tensor, Tensor?, Tensor[], Tensor?[], Device and Generator arguments are mapped to their
// native counterparts; mixed-device inputs are rejected as a native backend rejects them;
// written arguments (in-place, out=) are synchronised back, including resizes; and results are
// re-labelled as flagos tensors, written ones being the caller's own tensors.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torch_fl {

FLAGOS_API void call_native_aliased(
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack,
    c10::DispatchKey native_key);

} // namespace torch_fl
