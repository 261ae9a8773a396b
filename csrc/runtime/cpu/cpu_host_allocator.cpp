#include "runtime/cpu/cpu_host_allocator.h"

#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <cstring>

namespace torch_fl::cpu {

namespace {

void add(c10::CachingAllocator::Stat& stat, int64_t amount) {
  stat.current += amount;
  stat.peak = std::max(stat.peak, stat.current);
  stat.allocated += amount;
}

void remove(c10::CachingAllocator::Stat& stat, int64_t amount) {
  stat.current -= amount;
  stat.freed += amount;
}

// The statistics this allocator keeps (the timing ones stay zero).
template <typename F>
void for_each_stat(at::HostStats& stats, F f) {
  for (auto* stat :
       {&stats.allocations, &stats.allocated_bytes, &stats.active_requests, &stats.active_bytes}) {
    f(*stat);
  }
}

} // namespace

CpuHostAllocator& host_allocator() {
  static CpuHostAllocator instance;
  return instance;
}

c10::DataPtr CpuHostAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) {
    return c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU));
  }
  void* ptr = c10::alloc_cpu(nbytes);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_[reinterpret_cast<uintptr_t>(ptr)] = nbytes;
    // Every block is its own allocation and in use until freed.
    const auto bytes = static_cast<int64_t>(nbytes);
    add(stats_.allocations, 1);
    add(stats_.allocated_bytes, bytes);
    add(stats_.active_requests, 1);
    add(stats_.active_bytes, bytes);
    stats_.num_host_alloc += 1;
  }
  return c10::DataPtr(ptr, ptr, &CpuHostAllocator::free_pinned, c10::Device(c10::DeviceType::CPU));
}

void CpuHostAllocator::free_pinned(void* ptr) {
  auto& self = host_allocator();
  {
    std::lock_guard<std::mutex> lock(self.mutex_);
    auto it = self.blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != self.blocks_.end()) {
      const auto bytes = static_cast<int64_t>(it->second);
      remove(self.stats_.allocations, 1);
      remove(self.stats_.allocated_bytes, bytes);
      remove(self.stats_.active_requests, 1);
      remove(self.stats_.active_bytes, bytes);
      self.stats_.num_host_free += 1;
      self.blocks_.erase(it);
    }
  }
  c10::free_cpu(ptr);
}

c10::DeleterFnPtr CpuHostAllocator::raw_deleter() const {
  return &CpuHostAllocator::free_pinned;
}

void CpuHostAllocator::copy_data(void* dst, const void* src, std::size_t count) const {
  if (count > 0) {
    std::memcpy(dst, src, count);
  }
}

bool CpuHostAllocator::record_event(void* ptr, void*, c10::Stream) {
  return contains(ptr);
}

at::HostStats CpuHostAllocator::get_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CpuHostAllocator::reset_accumulated_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  for_each_stat(stats_, [](c10::CachingAllocator::Stat& stat) {
    stat.allocated = 0;
    stat.freed = 0;
  });
  stats_.num_host_alloc = 0;
  stats_.num_host_free = 0;
}

void CpuHostAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  for_each_stat(stats_, [](c10::CachingAllocator::Stat& stat) { stat.peak = stat.current; });
}

bool CpuHostAllocator::contains(const void* ptr) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) {
    return false;
  }
  --it;
  return address < it->first + it->second;
}

} // namespace torch_fl::cpu
