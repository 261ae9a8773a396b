#pragma once

// Layouts whose operators run the native device's kernels over aliases (sparse COO, strided
// nested) are served by a boxed fallback under their flagos dispatch key. A fallback comes after
// composite kernels, so an operator with both a native kernel for the layout and a
// CompositeExplicitAutograd one (copy_, clone, zero_, ...) would run the composite, a dense
// implementation; registering the fallback as that operator's own kernel puts the native one
// first. Once per process; the kernels stay registered.

#include <torch/library.h>

namespace torch_fl {

// For every aten operator with a kernel for `native_key` and none for `flagos_key`, the kernel
// `make_kernel()` makes.
void register_ahead_of_composites(
    c10::DispatchKey flagos_key, c10::DispatchKey native_key, torch::CppFunction (*make_kernel)());

// The layout's key of the native device (SparseCPU, NestedTensorCUDA, ...).
c10::DispatchKey native_layout_key(c10::DispatchKey functionality);

// Runs `op` with the native device's kernel for `native_key` over aliases of its arguments
// (aliased_call.h); an operator without one is refused, the message ending with `instead`.
void call_native_layout_kernel(
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack,
    c10::DispatchKey native_key,
    const char* instead);

} // namespace torch_fl
