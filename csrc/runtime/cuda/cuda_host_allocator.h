#pragma once

// Pinned host memory on the cuda accelerator is torch's CUDA caching host allocator: flagos
// and CUDA share one pool of pinned blocks, its statistics and its cache. This forwards to it
// through ATen's device-generic host-allocator registry, starting CUDA on first use only.

#include <ATen/core/CachingHostAllocator.h>

namespace torch_fl::cuda {

class CudaHostAllocator final : public at::HostAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dst, const void* src, std::size_t count) const override;

  // The stream is a flagos stream; the pool tracks CUDA streams (the same streams).
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override;
  void empty_cache() override;
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override;
  void reset_peak_stats() override;

 private:
  static at::HostAllocator& pool();
};

} // namespace torch_fl::cuda
