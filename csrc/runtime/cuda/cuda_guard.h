#pragma once

// Devices, streams and events of the cuda accelerator: flagos:N *is* cuda:N. Every call is
// translated to torch's CUDA guard, so a flagos stream is the current CUDA stream and vice
// versa, and events are CUDA events.

#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace torch_fl::cuda {

c10::Device to_cuda(c10::Device device);
c10::Stream to_cuda(const c10::Stream& stream);
c10::Stream to_flagos(const c10::Stream& stream);

class CudaGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
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
  const c10::impl::DeviceGuardImplInterface& cuda() const;
};

} // namespace torch_fl::cuda
