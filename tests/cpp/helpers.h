#pragma once

// Small helpers shared by the GoogleTest files: flagos devices, allocator statistics.

#include "runtime/accelerator.h"

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>

#include <cstdint>

namespace torch_fl::testing {

using c10::CachingAllocator::StatType;

inline c10::Device flagos(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::PrivateUse1, index);
}

inline c10::CachingDeviceAllocator::DeviceStats stats(c10::DeviceIndex index) {
  return accelerator().device_allocator()->getDeviceStats(index);
}

inline size_t pool(StatType type) {
  return static_cast<size_t>(type);
}

inline int64_t allocated_bytes(c10::DeviceIndex index) {
  return stats(index).allocated_bytes[pool(StatType::AGGREGATE)].current;
}

inline int64_t reserved_bytes(c10::DeviceIndex index) {
  return stats(index).reserved_bytes[pool(StatType::AGGREGATE)].current;
}

inline int64_t requested_bytes(c10::DeviceIndex index) {
  return stats(index).requested_bytes[pool(StatType::AGGREGATE)].current;
}

} // namespace torch_fl::testing
