// The catch-all: every operator without a flagos kernel runs through the router's fallback.

#include "aten/aliased_call.h"
#include "runtime/accelerator.h"

#include <torch/library.h>

namespace torch_fl {
namespace {

void flagos_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  call_native_aliased(op, stack, accelerator().native_dispatch_key());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&flagos_fallback>());
}

} // namespace
} // namespace torch_fl
