#include "runtime/cpu/cpu_host_allocator.h"

#include <c10/core/impl/alloc_cpu.h>

#include <cstring>

namespace torch_fl::cpu {

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
  }
  return c10::DataPtr(ptr, ptr, &CpuHostAllocator::free_pinned, c10::Device(c10::DeviceType::CPU));
}

void CpuHostAllocator::free_pinned(void* ptr) {
  auto& self = host_allocator();
  {
    std::lock_guard<std::mutex> lock(self.mutex_);
    self.blocks_.erase(reinterpret_cast<uintptr_t>(ptr));
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
