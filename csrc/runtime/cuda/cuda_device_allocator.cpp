#include "runtime/cuda/cuda_device_allocator.h"

#include "runtime/accelerator.h"
#include "runtime/cuda/cuda_guard.h"
#include "runtime/fork_guard.h"

#include "runtime/cuda/cuda_check.h"

#include <ATen/Context.h>
#include <c10/core/DeviceGuard.h>

#include <mutex>

namespace torch_fl::cuda {

void ensure_cuda_initialized() {
  check_not_in_bad_fork("use the CUDA device");
  static std::once_flag once;
  std::call_once(once, [] {
    note_device_runtime_started();
    at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  });
}

c10::DeviceAllocator& CudaDeviceAllocator::pool() {
  ensure_cuda_initialized();
  static c10::DeviceAllocator* cuda = c10::getDeviceAllocator(c10::DeviceType::CUDA);
  return *cuda;
}

c10::DataPtr CudaDeviceAllocator::allocate(size_t nbytes) {
  c10::DataPtr data = pool().allocate(nbytes);
  // The block stays the pool's (its deleter frees it there); only the label changes.
  data.unsafe_set_device(c10::Device(c10::DeviceType::PrivateUse1, data.device().index()));
  return data;
}

c10::DeleterFnPtr CudaDeviceAllocator::raw_deleter() const {
  return pool().raw_deleter();
}

void CudaDeviceAllocator::copy_data(void* dst, const void* src, std::size_t count) const {
  pool().copy_data(dst, src, count);
}

bool CudaDeviceAllocator::initialized() {
  return pool().initialized();
}

void CudaDeviceAllocator::emptyCache(c10::MempoolId_t mempool_id) {
  pool().emptyCache(mempool_id);
}

void CudaDeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  pool().recordStream(ptr, to_cuda(stream));
}

c10::CachingDeviceAllocator::DeviceStats CudaDeviceAllocator::getDeviceStats(
    c10::DeviceIndex device) {
  check_device_index(device);
  return pool().getDeviceStats(device);
}

void CudaDeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  check_device_index(device);
  pool().resetAccumulatedStats(device);
}

void CudaDeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  check_device_index(device);
  pool().resetPeakStats(device);
}

std::pair<size_t, size_t> CudaDeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  check_device_index(device);
  ensure_cuda_initialized();
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
  size_t free = 0;
  size_t total = 0;
  FLAGOS_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return {free, total};
}

} // namespace torch_fl::cuda
