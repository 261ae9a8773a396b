#pragma once

// flagos memory on the cuda accelerator is CUDA memory from torch's own caching allocator,
// reached through the device-generic registry: flagos and native CUDA tensors share one pool,
// and the statistics are the pool's.

#include <c10/core/CachingDeviceAllocator.h>

namespace torch_fl::cuda {

// Initialises torch's CUDA state (caching allocator and friends) once, on first need.
void ensure_cuda_initialized();

class CudaDeviceAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dst, const void* src, std::size_t count) const override;

  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

 private:
  static c10::DeviceAllocator& pool();
};

} // namespace torch_fl::cuda
