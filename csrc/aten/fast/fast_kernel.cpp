#include "aten/fast/fast_kernel.h"

namespace torch_fl::fast {

Target make_target() {
  auto& accel = accelerator();
  const auto native_type = accel.native_device_type();
  return Target{
      c10::DispatchKeySet(accel.native_dispatch_key()),
      native_type,
      /*direct=*/native_type != c10::DeviceType::CPU};
}

OpInfo make_info(const char* name, const char* overload, size_t num_args) {
  OpInfo info;
  const auto handle = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  info.entry = &routing::entry_of(handle);
  const auto& args = handle.schema().arguments();
  // _ops signatures take one C++ argument per schema argument; anything else would shift the
  // written mask and the argument names of device errors, so such an operator stays boxed.
  if (args.size() != num_args || num_args > 64) {
    return info;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = args[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      info.written |= uint64_t{1} << i;
    }
  }
  const auto route = routing::alias_route();
  info.usable = route.has_value() &&
                (*route == routing::Route::CpuFallback ? info.entry->has_cpu_kernel.load()
                                                       : info.entry->has_native_kernel.load());
  return info;
}

void RouteEvent::start(uint8_t route, at::StepCallbacks&& callbacks) {
  event_.emplace(std::move(callbacks));
  if (event_->isActive()) {
    event_->before(routing::route_event_name(static_cast<routing::Route>(route)));
  }
}

} // namespace torch_fl::fast
