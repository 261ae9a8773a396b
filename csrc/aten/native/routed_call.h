#pragma once

// Calls an operator's route (routing::route_call) from a flagos kernel of its own, for the
// calls that kernel does not handle itself: they keep the route table, counts and logging of
// any routed operator.

#include "aten/routing/router.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <utility>

namespace torch_fl::native {

template <class Op, class Sig = typename Op::schema>
struct Routed;

template <class Op, class R, class... Args>
struct Routed<Op, R(Args...)> {
  static R call(Args... args) {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    return c10::impl::BoxedKernelWrapper<R(Args...)>::call(
        routing::boxed_router(),
        op,
        c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
        std::forward<Args>(args)...);
  }
};

} // namespace torch_fl::native
