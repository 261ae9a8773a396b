#pragma once

// Device memory of the cpu accelerator: host memory, cached per virtual device, with the
// statistics torch.accelerator.memory_* reads. Blocks are rounded to 512 bytes and reused
// whole (no splitting); empty_cache returns every unused block to the system.

#include "runtime/accelerator.h"

#include <c10/core/CachingDeviceAllocator.h>

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace torch_fl::cpu {

class CpuDeviceAllocator final : public c10::DeviceAllocator {
 public:
  explicit CpuDeviceAllocator(c10::DeviceIndex device_count);
  ~CpuDeviceAllocator() override;

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

  // Accounts memory a native kernel allocated as flagos:device memory until it is released.
  c10::DataPtr adopt(c10::DataPtr&& native, size_t nbytes, c10::DeviceIndex device);
  // The device whose live block (own or adopted) contains ptr, or -1.
  c10::DeviceIndex device_of(const void* ptr) const;
  // Every segment of every device: blocks in use, cached blocks, adopted allocations.
  std::vector<MemorySegment> segments() const;

  // The share of the device's memory this process may reserve (torch.cuda's per-process limit).
  void set_memory_fraction(double fraction, c10::DeviceIndex device);
  double memory_fraction(c10::DeviceIndex device) const;

 private:
  struct Block;
  struct AdoptedBlock;
  struct DeviceState;

  DeviceState& state(c10::DeviceIndex device) const;
  bool within_limit_locked(DeviceState& st, c10::DeviceIndex device, size_t size);
  // Frees one device's cached blocks (a retry after a refused allocation frees only its own).
  void empty_device_cache(DeviceState& st);
  // Before the one retry of a refused allocation: counted (num_alloc_retries), cache freed.
  void free_cache_for_retry(DeviceState& st);
  // Fresh memory for a block of `size` bytes, or torch.OutOfMemoryError.
  void* new_segment(DeviceState& st, c10::DeviceIndex device, size_t size, size_t nbytes);
  [[noreturn]] void raise_out_of_memory(DeviceState& st, c10::DeviceIndex device, size_t nbytes);
  static void free_block(void* ctx);
  static void free_adopted(void* ctx);
  static void raw_free(void* ptr);
  void release(Block* block);

  std::vector<std::unique_ptr<DeviceState>> devices_;
};

} // namespace torch_fl::cpu
