#include "runtime/cpu/cpu_host_allocator.h"

#include "runtime/cpu/stat_update.h"

#include <c10/core/impl/alloc_cpu.h>

#include <chrono>
#include <cstring>
#include <mutex>

namespace torch_fl::cpu {

namespace {

using c10::CachingAllocator::Stat;

// A block is one allocation, in use until freed. `update` is increase() or decrease().
void account_block(at::HostStats& stats, size_t nbytes, void (*update)(Stat&, size_t)) {
  update(stats.allocations, 1);
  update(stats.allocated_bytes, nbytes);
  update(stats.active_requests, 1);
  update(stats.active_bytes, nbytes);
}

// Microseconds since `start`, as torch's host allocators time their system calls.
int64_t micros_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now() - start)
      .count();
}

// The block statistics this allocator keeps (timings apart).
template <typename F>
void for_each_stat(at::HostStats& stats, F f) {
  for (auto* stat :
       {&stats.allocations, &stats.allocated_bytes, &stats.active_requests, &stats.active_bytes}) {
    f(*stat);
  }
}

} // namespace

CpuHostAllocator& host_allocator() {
  static auto* instance = new CpuHostAllocator(); // never destroyed, as the accelerator
  return *instance;
}

c10::DataPtr CpuHostAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) {
    return c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CPU));
  }
  const auto start = std::chrono::steady_clock::now();
  void* ptr = c10::alloc_cpu(nbytes);
  const auto took = micros_since(start);
  {
    std::lock_guard<ForkSafeMutex> lock(mutex_);
    blocks_[reinterpret_cast<uintptr_t>(ptr)] = nbytes;
    account_block(stats_, nbytes, &increase);
    stats_.num_host_alloc += 1;
    stats_.host_alloc_time.increase(took);
  }
  return c10::DataPtr(ptr, ptr, &CpuHostAllocator::free_pinned, c10::Device(c10::DeviceType::CPU));
}

void CpuHostAllocator::free_pinned(void* ptr) {
  auto& self = host_allocator();
  bool known = false;
  {
    std::lock_guard<ForkSafeMutex> lock(self.mutex_);
    auto it = self.blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != self.blocks_.end()) {
      known = true;
      account_block(self.stats_, it->second, &decrease);
      self.stats_.num_host_free += 1;
      self.blocks_.erase(it);
    }
  }
  // Freed outside the lock (a large block's munmap takes a while), then timed in.
  const auto start = std::chrono::steady_clock::now();
  c10::free_cpu(ptr);
  if (known) {
    const auto took = micros_since(start);
    std::lock_guard<ForkSafeMutex> lock(self.mutex_);
    self.stats_.host_free_time.increase(took);
  }
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
  std::lock_guard<ForkSafeMutex> lock(mutex_);
  return stats_;
}

void CpuHostAllocator::reset_accumulated_stats() {
  std::lock_guard<ForkSafeMutex> lock(mutex_);
  for_each_stat(stats_, [](Stat& stat) {
    stat.allocated = 0;
    stat.freed = 0;
  });
  stats_.num_host_alloc = 0;
  stats_.num_host_free = 0;
  stats_.host_alloc_time.reset_accumulated();
  stats_.host_free_time.reset_accumulated();
}

void CpuHostAllocator::reset_peak_stats() {
  std::lock_guard<ForkSafeMutex> lock(mutex_);
  for_each_stat(stats_, [](Stat& stat) { stat.peak = stat.current; });
  stats_.host_alloc_time.reset_peak();
  stats_.host_free_time.reset_peak();
}

bool CpuHostAllocator::contains(const void* ptr) const {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<ForkSafeMutex> lock(mutex_);
  auto it = blocks_.upper_bound(address);
  if (it == blocks_.begin()) {
    return false;
  }
  --it;
  return address < it->first + it->second;
}

} // namespace torch_fl::cpu
