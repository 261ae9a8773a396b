#include "aten/native_layout_kernels.h"

#include "aten/aliased_call.h"
#include "runtime/accelerator.h"

#include <string>

namespace torch_fl {

void register_ahead_of_composites(
    c10::DispatchKey flagos_key, c10::DispatchKey native_key, torch::CppFunction (*make_kernel)()) {
  auto* lib = new torch::Library( // never destroyed: kernels stay registered for the process
      torch::Library::IMPL, "aten", flagos_key, __FILE__, __LINE__);
  auto& dispatcher = c10::Dispatcher::singleton();
  for (const auto& name : dispatcher.getAllOpNames()) {
    if (name.name.rfind("aten::", 0) != 0) {
      continue;
    }
    auto op = dispatcher.findSchema(name);
    if (!op || op->hasKernelForDispatchKey(flagos_key) ||
        !op->hasKernelForDispatchKey(native_key)) {
      continue;
    }
    std::string schema_name = name.name.substr(6);
    if (!name.overload_name.empty()) {
      schema_name += "." + name.overload_name;
    }
    lib->impl(schema_name.c_str(), make_kernel());
  }
}

void call_native_layout_kernel(
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack,
    c10::DispatchKey native_key,
    const char* instead) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      op.hasComputedKernelForDispatchKey(native_key),
      op.schema().operator_name(),
      " has no ",
      c10::toString(native_key),
      " kernel in the installed torch, so it cannot run on flagos ",
      instead);
  call_native_aliased(op, stack, native_key);
}

c10::DispatchKey native_layout_key(c10::DispatchKey functionality) {
  return c10::toRuntimePerBackendFunctionalityKey(
      functionality, c10::toBackendComponent(accelerator().native_dispatch_key()));
}

} // namespace torch_fl
