#pragma once

// Pinned host memory of the cpu accelerator: host memory that remembers it was pinned, so
// Tensor.is_pinned(), pin_memory() and DataLoader(pin_memory=True) behave as on CUDA.

#include "runtime/fork_safe_mutex.h"

#include <ATen/core/CachingHostAllocator.h>

#include <cstdint>
#include <map>

namespace torch_fl::cpu {

class CpuHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dst, const void* src, std::size_t count) const override;

  // Host copies complete before they return: there is no pending use to record.
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override;
  // Blocks go back to the system when freed: nothing is cached.
  void empty_cache() override {}
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override;
  void reset_peak_stats() override;

  // True for any address inside a live pinned block (views point inside blocks).
  bool contains(const void* ptr) const;

 private:
  static void free_pinned(void* ptr);

  mutable ForkSafeMutex mutex_;        // free in a forked child (fork_safe_mutex.h)
  std::map<uintptr_t, size_t> blocks_; // start -> size
  at::HostStats stats_;
};

CpuHostAllocator& host_allocator();

} // namespace torch_fl::cpu
