// Registers the flagos runtime with c10/ATen: device guard, device and host allocators, hooks.

#include "runtime/accelerator.h"
#include "runtime/graph_capture.h"
#include "runtime/hooks.h"

#include <ATen/Context.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/DeviceCapability.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_fl {
namespace {

// The registry wants a type; this one forwards to the accelerator's guard.
struct FlagosGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static const c10::impl::DeviceGuardImplInterface& impl() {
    return accelerator_guard();
  }
  c10::DeviceType type() const override {
    return c10::DeviceType::PrivateUse1;
  }
  c10::Device exchangeDevice(c10::Device d) const override {
    return impl().exchangeDevice(d);
  }
  c10::Device getDevice() const override {
    return impl().getDevice();
  }
  void setDevice(c10::Device d) const override {
    impl().setDevice(d);
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    impl().uncheckedSetDevice(d);
  }
  c10::Stream getStream(c10::Device d) const override {
    return impl().getStream(d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return impl().getDefaultStream(d);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override {
    return impl().getStreamFromGlobalPool(d, high);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    return impl().getNewStream(d, priority);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return impl().exchangeStream(s);
  }
  void destroyEvent(void* e, const c10::DeviceIndex i) const noexcept override {
    impl().destroyEvent(e, i);
  }
  void record(void** e, const c10::Stream& s, const c10::DeviceIndex i, const c10::EventFlag f)
      const override {
    impl().record(e, s, i, f);
  }
  void block(void* e, const c10::Stream& s) const override {
    impl().block(e, s);
  }
  bool queryEvent(void* e) const override {
    return impl().queryEvent(e);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return accelerator().device_count();
  }
  bool queryStream(const c10::Stream& s) const override {
    return impl().queryStream(s);
  }
  void synchronizeStream(const c10::Stream& s) const override {
    impl().synchronizeStream(s);
  }
  void synchronizeEvent(void* e) const override {
    impl().synchronizeEvent(e);
  }
  void synchronizeDevice(const c10::DeviceIndex i) const override {
    impl().synchronizeDevice(i);
  }
  void recordDataPtrOnStream(const c10::DataPtr& p, const c10::Stream& s) const override {
    accelerator().device_allocator()->recordStream(p, s);
  }
  double elapsedTime(void* a, void* b, const c10::DeviceIndex i) const override {
    return impl().elapsedTime(a, b, i);
  }
  // torch.Stream.is_capturing(): a flagos capture records the current stream of the thread that
  // began it (graph_capture.h). No `override`: the interface gained this virtual in torch 2.12
  // (pytorch#171443), and against older torch the same source makes it a plain method.
  bool isStreamCapturing(const c10::Stream& s) const { // NOLINT(modernize-use-override)
    return is_capturing_stream(s);
  }
  // torch.accelerator.get_device_capability(): every accelerator runs every dtype (the cpu one on
  // CPU kernels, the device ones on the vendor's), which is what the default reports.
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    check_device_index(d.index());
    return c10::DeviceCapability();
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, FlagosGuardImpl);

const bool registered = [] {
  c10::SetAllocator(c10::DeviceType::PrivateUse1, accelerator().device_allocator());
  // Without it torch.accelerator.empty_host_cache() dereferenced a null allocator.
  at::setHostAllocator(c10::DeviceType::PrivateUse1, accelerator().host_allocator());
  at::RegisterPrivateUse1HooksInterface(new FlagosHooks());
  // Tensor.is_pinned() answers false for an accelerator torch has not "initialized", and only
  // a pinned allocation through flagos's hooks marks it so; on a CUDA build torch pins factory
  // tensors (`torch.empty(n, pin_memory=True)`) through CUDA's hooks, so such a tensor read as
  // unpinned. The flagos hooks' init() does nothing (the runtime starts on first use): marked
  // now. (The cuda accelerator's answer still needs a CUDA context, as torch.cuda's does.)
  at::globalContext().lazyInitDevice(c10::DeviceType::PrivateUse1);
  return true;
}();

} // namespace
} // namespace torch_fl
