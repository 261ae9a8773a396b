#pragma once

// Updates of one allocator statistic (current, peak and the running totals), shared by the
// cpu accelerator's device and host allocators. Callers hold their allocator's lock.

#include <c10/core/CachingDeviceAllocator.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace torch_fl::cpu {

inline void increase(c10::CachingAllocator::Stat& s, size_t amount) {
  s.current += static_cast<int64_t>(amount);
  s.peak = std::max(s.peak, s.current);
  s.allocated += static_cast<int64_t>(amount);
}

inline void decrease(c10::CachingAllocator::Stat& s, size_t amount) {
  s.current -= static_cast<int64_t>(amount);
  s.freed += static_cast<int64_t>(amount);
}

} // namespace torch_fl::cpu
