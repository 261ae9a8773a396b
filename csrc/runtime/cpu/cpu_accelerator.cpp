// The cpu accelerator: N virtual flagos devices over host memory, kernels from the CPU backend.

#include "runtime/accelerator.h"
#include "runtime/config_error.h"
#include "runtime/cpu/cpu_device_allocator.h"
#include "runtime/cpu/cpu_guard.h"
#include "runtime/cpu/cpu_host_allocator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/CPUAllocator.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace torch_fl {
namespace {

constexpr c10::DeviceIndex kDefaultDeviceCount = 2;

// FLAGOS_CPU_DEVICE_COUNT, read once. A bad value leaves a configuration error for the Python
// import to raise (nothing may throw during library load) and zero devices.
c10::DeviceIndex read_device_count() {
  const char* raw = std::getenv("FLAGOS_CPU_DEVICE_COUNT");
  if (raw == nullptr || *raw == '\0') {
    return kDefaultDeviceCount;
  }
  // Digits only: strtol alone would also take " 3" and "+3" (and then refuse "3 ").
  const size_t length = std::strlen(raw);
  const bool digits = std::all_of(raw, raw + length, [](char c) { return c >= '0' && c <= '9'; });
  const long value = digits && length <= 4 ? std::strtol(raw, nullptr, 10) : -1;
  if (value < 1 || value > cpu::kMaxCpuDevices) {
    set_config_error(
        std::string("FLAGOS_CPU_DEVICE_COUNT=") + raw +
        " is invalid: use a whole number from 1 to " + std::to_string(cpu::kMaxCpuDevices) +
        " (the default is " + std::to_string(kDefaultDeviceCount) + ")");
    return 0;
  }
  return static_cast<c10::DeviceIndex>(value);
}

class CpuAccelerator final : public Accelerator {
 public:
  CpuAccelerator() : count_(read_device_count()), guard_(count_), device_allocator_(count_) {}

  const char* name() const override {
    return "cpu";
  }
  c10::DeviceType native_device_type() const override {
    return c10::DeviceType::CPU;
  }
  c10::DispatchKey native_dispatch_key() const override {
    return c10::DispatchKey::CPU;
  }
  c10::Device native_device(c10::DeviceIndex) const override {
    return c10::Device(c10::DeviceType::CPU);
  }
  c10::DeviceIndex device_count() const noexcept override {
    return count_;
  }
  const c10::impl::DeviceGuardImplInterface& guard() const override {
    return guard_;
  }
  c10::DeviceAllocator* device_allocator() override {
    return &device_allocator_;
  }
  void set_memory_fraction(double fraction, c10::DeviceIndex index) override {
    device_allocator_.set_memory_fraction(fraction, index);
  }
  double memory_fraction(c10::DeviceIndex index) const override {
    return device_allocator_.memory_fraction(index);
  }
  std::vector<MemorySegment> memory_segments() const override {
    return device_allocator_.segments();
  }
  c10::Allocator* native_allocator() const override {
    return c10::GetCPUAllocator();
  }
  at::HostAllocator* host_allocator() override {
    return &cpu::host_allocator();
  }
  bool is_pinned_ptr(const void* ptr) const override {
    return cpu::host_allocator().contains(ptr);
  }
  c10::Device device_from_ptr(void* ptr) const override {
    const auto index = device_allocator_.device_of(ptr);
    return c10::Device(
        c10::DeviceType::PrivateUse1, index >= 0 ? index : guard_.getDevice().index());
  }
  void copy_bytes(void* dst, const void* src, size_t nbytes) const override {
    if (nbytes > 0) {
      std::memcpy(dst, src, nbytes);
    }
  }
  c10::DataPtr adopt_native(c10::DataPtr&& native, size_t nbytes, c10::DeviceIndex index) override {
    return device_allocator_.adopt(std::move(native), nbytes, index);
  }
  at::Generator make_native_generator(c10::DeviceIndex) const override {
    return at::detail::createCPUGenerator();
  }
  at::Generator default_native_generator(c10::DeviceIndex index) const override {
    // Independent of the CPU's own default generator; native_dropout, the one kernel that
    // draws without a generator argument, has a flagos kernel on this accelerator. Seeded from
    // the system as CUDA's and CPU's default generators are: without a manual seed every
    // process and device draws different numbers.
    auto generator = make_native_generator(index);
    generator.seed();
    return generator;
  }
  DeviceProperties properties(c10::DeviceIndex index) const override {
    check_device_index(index);
    DeviceProperties p;
    p.name = "flagos cpu accelerator (host memory)";
    p.total_memory =
        static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
    p.multi_processor_count = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    return p;
  }

 private:
  c10::DeviceIndex count_;
  cpu::CpuGuardImpl guard_;
  mutable cpu::CpuDeviceAllocator device_allocator_;
};

} // namespace

Accelerator& accelerator() {
  // Never destroyed: threads torch does not join (autograd's, a collective's) may still free
  // device memory while the process exits.
  static auto* instance = new CpuAccelerator();
  return *instance;
}

} // namespace torch_fl
