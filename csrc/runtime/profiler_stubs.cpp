// Device events for torch's legacy profiler (torch.autograd.profiler.profile(use_device=
// "flagos")). Without registered PrivateUse1 stubs that profiler warned "PrivateUse1 used in
// profiler but not enabled" on every operator and reported garbage times. The events are flagos
// events on the current flagos stream, so they mean what the accelerator's events mean: CUDA
// events on the cuda accelerator, the host clock on the cpu accelerator.

#include "runtime/accelerator.h"

#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <c10/util/ApproximateClock.h>
#include <torch/csrc/profiler/stubs/base.h>

#include <memory>

namespace torch_fl {
namespace {

using torch::profiler::impl::ProfilerVoidEventStub;

class FlagosProfilerStubs final : public torch::profiler::impl::ProfilerStubs {
 public:
  void record(
      c10::DeviceIndex* device, ProfilerVoidEventStub* event, int64_t* cpu_ns) const override {
    const auto& guard = accelerator_guard();
    const c10::Device current = guard.getDevice();
    if (device != nullptr) {
      *device = current.index();
    }
    // Timing events (BACKEND_DEFAULT), as torch.flagos.Event(enable_timing=True) makes.
    auto recorded =
        std::make_shared<c10::Event>(c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT);
    if (cpu_ns != nullptr) {
      *cpu_ns = c10::getTime();
    }
    recorded->record(guard.getStream(current));
    *event = std::move(recorded);
  }

  // Microseconds from `start` to `end`, as the CUDA stubs report.
  float elapsed(
      const ProfilerVoidEventStub* start, const ProfilerVoidEventStub* end) const override {
    auto* from = static_cast<c10::Event*>(start->get());
    auto* to = static_cast<c10::Event*>(end->get());
    from->synchronize();
    to->synchronize();
    return static_cast<float>(from->elapsedTime(*to) * 1000.0);
  }

  // Markers and ranges are NVTX's on CUDA; flagos has no such tool to annotate.
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}

  bool enabled() const override {
    return true;
  }

  void onEachDevice(std::function<void(int)> op) const override {
    for (c10::DeviceIndex i = 0; i < accelerator().device_count(); ++i) {
      c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, i));
      op(static_cast<int>(i));
    }
  }

  void synchronize() const override {
    for (c10::DeviceIndex i = 0; i < accelerator().device_count(); ++i) {
      accelerator_guard().synchronizeDevice(i);
    }
  }
};

const bool registered = [] {
  static FlagosProfilerStubs stubs;
  torch::profiler::impl::registerPrivateUse1Methods(&stubs);
  return true;
}();

} // namespace
} // namespace torch_fl
