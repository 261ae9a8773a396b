#pragma once

#include "macros.h"
#include "runtime/fork_guard.h"

// The accelerator interface: what the flagos device needs from the hardware it runs on.
// One implementation is compiled per build (csrc/runtime/<accelerator>/), chosen by
// FLAGOS_ACCELERATOR; everything above this layer is accelerator-neutral.

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/DispatchKey.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <ATen/core/Generator.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace at {
struct HostAllocator;
} // namespace at

namespace torch_fl {

struct DeviceProperties {
  std::string name;
  int major = 0;
  int minor = 0;
  size_t total_memory = 0;
  int multi_processor_count = 0;
};

// One segment of flagos device memory, as torch.flagos.memory_snapshot() lists it.
struct MemorySegment {
  c10::DeviceIndex device = 0;
  uintptr_t address = 0;
  size_t size = 0;      // reserved
  size_t requested = 0; // asked for by the allocation using it (0 while cached)
  bool in_use = false;  // handed out (false: cached for reuse)
  bool adopted = false; // memory a native kernel allocated (a routed call's result)
};

class Accelerator {
 public:
  virtual ~Accelerator() = default;

  // "cpu", "cuda" or "dcu": the FLAGOS_ACCELERATOR this build was made for.
  virtual const char* name() const = 0;

  // The device type and dispatch key whose kernels back flagos memory zero-copy.
  virtual c10::DeviceType native_device_type() const = 0;
  virtual c10::DispatchKey native_dispatch_key() const = 0;
  // The native device that aliases flagos:index (cpu for the cpu accelerator).
  virtual c10::Device native_device(c10::DeviceIndex index) const = 0;

  // Must not throw (DeviceGuardImplInterface contract); 0 on error.
  virtual c10::DeviceIndex device_count() const noexcept = 0;

  // Device and stream bookkeeping, expressed with PrivateUse1 devices and streams.
  virtual const c10::impl::DeviceGuardImplInterface& guard() const = 0;

  // flagos device memory (a c10::DeviceAllocator with statistics).
  virtual c10::DeviceAllocator* device_allocator() = 0;
  // The allocator native kernels use; resizes of aliased out= tensors draw from it.
  virtual c10::Allocator* native_allocator() const = 0;
  // Pinned host memory for fast transfers; also PrivateUse1's entry in ATen's host-allocator
  // registry (torch.accelerator.empty_host_cache). Called at registration: must not start the
  // device runtime.
  virtual at::HostAllocator* host_allocator() = 0;
  virtual bool is_pinned_ptr(const void* ptr) const = 0;
  // The flagos device that owns a device pointer (current device when unknown).
  virtual c10::Device device_from_ptr(void* ptr) const = 0;

  // Copies bytes between two flagos allocations (may be on different devices).
  virtual void copy_bytes(void* dst, const void* src, size_t nbytes) const = 0;

  // Wraps memory that a native kernel allocated so it can back a flagos storage.
  // `native` is a DataPtr labelled with the native device; the result is labelled flagos:index
  // and keeps the allocation alive (and accounted) until flagos releases it.
  virtual c10::DataPtr adopt_native(
      c10::DataPtr&& native, size_t nbytes, c10::DeviceIndex index) = 0;

  // A fresh native generator; flagos generators wrap one (see generator.h).
  virtual at::Generator make_native_generator(c10::DeviceIndex index) const = 0;
  // The native generator behind flagos:index's default generator. On a device accelerator it is
  // the native device's default generator, so kernels that take no generator argument (dropout)
  // draw from the state torch.flagos.manual_seed sets.
  virtual at::Generator default_native_generator(c10::DeviceIndex index) const = 0;

  virtual DeviceProperties properties(c10::DeviceIndex index) const = 0;

  // The share of flagos:index's memory this process may reserve. Device accelerators share the
  // native pool, whose limit torch.cuda sets (torch.flagos calls it); only the cpu accelerator's
  // own pool implements these.
  virtual void set_memory_fraction(double fraction, c10::DeviceIndex index);
  virtual double memory_fraction(c10::DeviceIndex index) const;

  // The segments of the accelerator's own pool (torch.flagos.memory_snapshot on the cpu
  // accelerator). Device accelerators share the native pool, whose snapshot torch.cuda takes.
  virtual std::vector<MemorySegment> memory_segments() const;
};

// The accelerator of this build. Created on first use; never destroyed.
FLAGOS_API Accelerator& accelerator();

// accelerator().guard(), resolved once: the autograd engine and every routed call on a
// multi-device machine ask the guard, where a call through the accelerator object each time
// showed in instruction counts (docs/performance.md).
inline const c10::impl::DeviceGuardImplInterface& accelerator_guard() {
  static const c10::impl::DeviceGuardImplInterface& guard = accelerator().guard();
  return guard;
}

// Throws a c10::Error naming the valid range unless 0 <= index < device_count(). Wide, so an
// index from Python is checked before it is narrowed to c10::DeviceIndex (257 would wrap to 1).
FLAGOS_API void check_device_index(int64_t index);

namespace detail {
// Whether this process has exactly one flagos device: -1 until first asked, then 0 or 1.
FLAGOS_API extern std::atomic<int8_t> single_device;
FLAGOS_API bool is_current_device_slow(c10::DeviceIndex index);
FLAGOS_API void switch_device(c10::OptionalDeviceGuard& guard, c10::DeviceIndex index);
} // namespace detail

// Whether flagos:index is the current device. Free on a one-device machine, where it always
// is (reading it costs a CUDA runtime call on device accelerators). Inline: every routed call
// asks.
inline bool is_current_device(c10::DeviceIndex index) {
  if (C10_LIKELY(detail::single_device.load(std::memory_order_relaxed) == 1 && !in_bad_fork())) {
    return true;
  }
  return detail::is_current_device_slow(index);
}

// Makes flagos:index current for a scope, switching only when it is not current (so never on a
// one-device machine, where a device guard would cost three CUDA runtime calls). An unresolved
// index (-1: the call named no device) leaves the current device as it is.
class DeviceScope {
 public:
  explicit DeviceScope(c10::DeviceIndex index) {
    if (index >= 0 && C10_UNLIKELY(!is_current_device(index))) {
      detail::switch_device(guard_, index);
    }
  }

 private:
  c10::OptionalDeviceGuard guard_;
};

// The flagos device index a tensor option or argument resolves to (-1 means current; any other
// negative index is refused).
FLAGOS_API c10::DeviceIndex resolve_device_index(c10::DeviceIndex index);

} // namespace torch_fl
