// The catch-all: every operator without a flagos kernel runs through the router, which picks
// its route (csrc/aten/routing/router.h).

#include "aten/routing/router.h"

#include <torch/library.h>

namespace torch_fl {
namespace {

void flagos_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  routing::route_call(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&flagos_fallback>());
}

} // namespace
} // namespace torch_fl
