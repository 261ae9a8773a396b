#pragma once

// Devices, streams and events of the cpu accelerator.
//
// Kernels run synchronously on the calling thread, so by the time an operator returns its work
// is complete: streams are ordered trivially, queries report completion, and events carry the
// host time at which they were recorded. Stream identity (current, default, pooled, new streams)
// is kept per thread and device exactly as CUDA does, so stream-aware code behaves the same.

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_fl::cpu {

// FLAGOS_CPU_DEVICE_COUNT's upper bound.
constexpr int kMaxCpuDevices = 64;

class CpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  explicit CpuGuardImpl(c10::DeviceIndex device_count);

  c10::DeviceType type() const override;
  c10::Device exchangeDevice(c10::Device device) const override;
  c10::Device getDevice() const override;
  void setDevice(c10::Device device) const override;
  void uncheckedSetDevice(c10::Device device) const noexcept override;
  c10::Stream getStream(c10::Device device) const override;
  c10::Stream getDefaultStream(c10::Device device) const override;
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool high_priority) const override;
  c10::Stream getNewStream(c10::Device device, int priority) const override;
  c10::Stream exchangeStream(c10::Stream stream) const override;
  void destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept override;
  void record(
      void** event,
      const c10::Stream& stream,
      const c10::DeviceIndex device_index,
      const c10::EventFlag flag) const override;
  void block(void* event, const c10::Stream& stream) const override;
  bool queryEvent(void* event) const override;
  c10::DeviceIndex deviceCount() const noexcept override;
  bool queryStream(const c10::Stream& stream) const override;
  void synchronizeStream(const c10::Stream& stream) const override;
  void synchronizeEvent(void* event) const override;
  void synchronizeDevice(const c10::DeviceIndex device_index) const override;
  double elapsedTime(void* start, void* end, const c10::DeviceIndex device_index) const override;

 private:
  c10::DeviceIndex checked_index(c10::Device device) const;
  C10_NOINLINE c10::DeviceIndex checked_index_slow(c10::Device device) const;
  c10::DeviceIndex device_count_;
};

} // namespace torch_fl::cpu
