#pragma once

#include "macros.h"

// Runs an operator's kernel on native counterparts of its flagos arguments.
//
// Tensor, Tensor?, Tensor[], Tensor?[], Device and Generator arguments are mapped to their
// native counterparts; mixed-device inputs are rejected as a native backend rejects them;
// written arguments (in-place, out=) are synchronised back, including resizes; and results are
// re-labelled as flagos tensors, written ones being the caller's own tensors.
//
// Two mappings exist. Alias: zero-copy native TensorImpls over the flagos memory (the cpu
// accelerator's CPU kernels, the cuda accelerator's CUDA kernels, and the arguments handed to
// Python kernels); a sparse COO tensor maps to a native sparse tensor over aliases of its
// indices and values (aten/sparse/sparse_alias.h). Copy: host CPU copies, for running a CPU kernel
// when flagos memory is device memory (cpu_fallback on a device accelerator).
//
// The per-operator work that depends only on the schema (which arguments are tensors, which
// are written, which argument each written result returns) is an ArgPlan, built once per
// operator by the router and reused on every call.

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <cstdint>

namespace torch_fl {

struct FLAGOS_API ArgPlan {
  enum class Kind : uint8_t {
    Tensor,
    TensorList,
    OptionalTensorList,
    Device,
    Generator,
    OptionalGenerator
  };
  struct Arg {
    uint16_t index;
    Kind kind;
    bool written;
    bool view_source = false; // a result may be a view of it (see returns_view_of)
  };
  // Only the arguments the mapping touches, in schema order.
  c10::SmallVector<Arg, 6> args;
  // Per result: the argument it returns (in-place, out=), or -1.
  c10::SmallVector<int16_t, 2> returns_arg;
  // Per result, where has_views: the read-only argument it is a view of (`Tensor(a) x ->
  // Tensor(a)`), or -1. Only for operators without an ADInplaceOrView kernel of their own
  // (custom operators): aten's view operators have one, which makes their results autograd
  // views above the device.
  c10::SmallVector<int16_t, 2> returns_view_of;
  uint16_t num_args = 0;
  uint16_t num_returns = 0;
  bool has_written = false;
  bool has_views = false;

  static ArgPlan build(const c10::OperatorHandle& op);
};

enum class Mapping : uint8_t { Alias, Copy };

// The state of one call between prepare_call and finish_call.
struct PreparedCall {
  struct Written {
    at::Tensor original;
    at::Tensor mapped;
    uint32_t mapped_version; // a Python kernel's in-place update bumps the mapped tensor's
    c10::Storage mirror;     // Copy mapping: the host span of a mirrored tensor (host_copy.h)
  };
  c10::DeviceIndex index = -1;
  Mapping mapping = Mapping::Alias;
  // Fresh native results may be re-labelled in place (not for results a Python kernel made,
  // whose Python objects may outlive the call).
  bool relabel_in_place = false;
  // The caller hands the aliases back to the pool after the call (not for Python kernels:
  // holding an alias while its Python object dies would keep that object alive).
  bool release_aliases = false;
  // Read-only flagos tensor arguments stay on the stack unmapped (device-checked) for the
  // caller to map (the flagos_python route gives kernels aliases it keeps between calls).
  bool defer_read_aliases = false;
  // The kernel's own torch calls record autograd history (autograd_boundary.h): aliases and
  // results are joined to the flagos tensors' history, and aliases are not handed back.
  bool autograd = false;
  c10::SmallVector<Written, 2> written;
  // Aliases of read-only tensor arguments, kept when release_aliases is set.
  c10::SmallVector<at::Tensor, 4> read;
  // The caller's IValues of written arguments, returned as the written results.
  c10::SmallVector<std::pair<uint16_t, c10::IValue>, 2> written_args;
  // The caller's flagos tensors a result may be a view of (ArgPlan::returns_view_of), with the
  // tensor the kernel was given for each (undefined when the caller maps them; held, so no
  // result can take its address): a kernel returning that very tensor returns the caller's, as a
  // CPU kernel returning its argument does.
  struct ViewSource {
    uint16_t index;
    at::Tensor source;
    at::Tensor given;
  };
  c10::SmallVector<ViewSource, 1> view_sources;
  // The operator's Device argument, when given (a flagos one with its index resolved).
  std::optional<c10::Device> result_device;
};

// Checks devices and replaces the operator's arguments on the stack by native counterparts.
FLAGOS_API void prepare_call(
    const c10::OperatorHandle& op,
    const ArgPlan& plan,
    torch::jit::Stack* stack,
    Mapping mapping,
    PreparedCall& call);

// After the kernel left its results on the stack: syncs written arguments back and re-labels
// results as flagos tensors (written ones are the caller's tensors).
FLAGOS_API void finish_call(
    const c10::OperatorHandle& op,
    const ArgPlan& plan,
    torch::jit::Stack* stack,
    PreparedCall& call);

// prepare_call + redispatch to `native_key` + finish_call. `has_kernel` is whether the
// operator has a kernel for that key (checked by the caller once per operator).
FLAGOS_API void call_native(
    const c10::OperatorHandle& op,
    const ArgPlan& plan,
    torch::jit::Stack* stack,
    c10::DispatchKey native_key,
    Mapping mapping,
    bool has_kernel);

// The same for one-off callers (builds the plan on every call).
FLAGOS_API void call_native_aliased(
    const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey native_key);

} // namespace torch_fl
