#include "runtime/cuda/cuda_guard.h"

#include "runtime/accelerator.h"
#include "runtime/fork_guard.h"

#include <c10/util/Exception.h>

namespace torch_fl::cuda {
namespace {
constexpr auto kFlagos = c10::DeviceType::PrivateUse1;
constexpr auto kCuda = c10::DeviceType::CUDA;
} // namespace

const c10::impl::DeviceGuardImplInterface& CudaGuardImpl::cuda() const {
  static const auto* impl = c10::impl::getDeviceGuardImpl(kCuda);
  return *impl;
}

c10::Device to_cuda(c10::Device device) {
  if (C10_UNLIKELY(in_bad_fork())) {
    check_not_in_bad_fork("switch CUDA devices or streams");
  }
  TORCH_CHECK(device.type() == kFlagos, "flagos device guard got a ", device.type(), " device");
  // Never hand an unresolved index (-1) to CUDA objects.
  const auto index = resolve_device_index(device.index());
  return c10::Device(kCuda, index);
}

c10::Stream to_cuda(const c10::Stream& stream) {
  return c10::Stream(c10::Stream::UNSAFE, to_cuda(stream.device()), stream.id());
}

c10::Stream to_flagos(const c10::Stream& stream) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kFlagos, stream.device_index()), stream.id());
}

c10::DeviceType CudaGuardImpl::type() const {
  return kFlagos;
}

c10::Device CudaGuardImpl::exchangeDevice(c10::Device device) const {
  const auto previous = cuda().exchangeDevice(to_cuda(device));
  return c10::Device(kFlagos, previous.index());
}

c10::Device CudaGuardImpl::getDevice() const {
  if (C10_UNLIKELY(in_bad_fork())) {
    check_not_in_bad_fork("query the current CUDA device");
  }
  return c10::Device(kFlagos, cuda().getDevice().index());
}

void CudaGuardImpl::setDevice(c10::Device device) const {
  cuda().setDevice(to_cuda(device));
}

void CudaGuardImpl::uncheckedSetDevice(c10::Device device) const noexcept {
  if (device.index() >= 0) {
    cuda().uncheckedSetDevice(c10::Device(kCuda, device.index()));
  }
}

c10::Stream CudaGuardImpl::getStream(c10::Device device) const {
  return to_flagos(cuda().getStream(to_cuda(device)));
}

c10::Stream CudaGuardImpl::getDefaultStream(c10::Device device) const {
  return to_flagos(cuda().getDefaultStream(to_cuda(device)));
}

c10::Stream CudaGuardImpl::getStreamFromGlobalPool(c10::Device device, bool high_priority) const {
  return to_flagos(cuda().getStreamFromGlobalPool(to_cuda(device), high_priority));
}

c10::Stream CudaGuardImpl::getNewStream(c10::Device device, int priority) const {
  return to_flagos(cuda().getNewStream(to_cuda(device), priority));
}

c10::Stream CudaGuardImpl::exchangeStream(c10::Stream stream) const {
  return to_flagos(cuda().exchangeStream(to_cuda(stream)));
}

void CudaGuardImpl::destroyEvent(void* event, const c10::DeviceIndex device_index) const noexcept {
  cuda().destroyEvent(event, device_index);
}

void CudaGuardImpl::record(
    void** event,
    const c10::Stream& stream,
    const c10::DeviceIndex device_index,
    const c10::EventFlag flag) const {
  cuda().record(event, to_cuda(stream), device_index, flag);
}

void CudaGuardImpl::block(void* event, const c10::Stream& stream) const {
  cuda().block(event, to_cuda(stream));
}

bool CudaGuardImpl::queryEvent(void* event) const {
  return cuda().queryEvent(event);
}

c10::DeviceIndex CudaGuardImpl::deviceCount() const noexcept {
  return cuda().deviceCount();
}

bool CudaGuardImpl::queryStream(const c10::Stream& stream) const {
  return cuda().queryStream(to_cuda(stream));
}

void CudaGuardImpl::synchronizeStream(const c10::Stream& stream) const {
  cuda().synchronizeStream(to_cuda(stream));
}

void CudaGuardImpl::synchronizeEvent(void* event) const {
  cuda().synchronizeEvent(event);
}

void CudaGuardImpl::synchronizeDevice(const c10::DeviceIndex device_index) const {
  cuda().synchronizeDevice(device_index);
}

double CudaGuardImpl::elapsedTime(
    void* start, void* end, const c10::DeviceIndex device_index) const {
  return cuda().elapsedTime(start, end, device_index);
}

} // namespace torch_fl::cuda
