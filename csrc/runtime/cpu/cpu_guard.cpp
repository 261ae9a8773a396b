#include "runtime/cpu/cpu_guard.h"

#include "runtime/accelerator.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>

namespace torch_fl::cpu {
namespace {

constexpr c10::StreamId kDefaultStream = 0;
constexpr c10::StreamId kPoolSize = 32; // ids 1..32: the per-device pool, round robin
constexpr c10::StreamId kFirstNewStream = kPoolSize + 1;

struct CpuEvent {
  c10::DeviceIndex device;
  bool timing;
  bool recorded = false;
  std::chrono::steady_clock::time_point when{};
};

thread_local c10::DeviceIndex current_device = 0;

// This thread's current stream per device; zero is the default stream. Plain data, so reading
// it needs no initialisation guard (the autograd engine asks once or twice per backward node).
static_assert(kDefaultStream == 0);
thread_local c10::StreamId current_streams[kMaxCpuDevices]{};

std::atomic<c10::StreamId> next_new_stream{kFirstNewStream};
std::atomic<uint32_t> next_pool_stream{0};

CpuEvent* as_event(void* event) {
  return static_cast<CpuEvent*>(event);
}

} // namespace

CpuGuardImpl::CpuGuardImpl(c10::DeviceIndex device_count) : device_count_(device_count) {}

c10::DeviceType CpuGuardImpl::type() const {
  return c10::DeviceType::PrivateUse1;
}

c10::DeviceIndex CpuGuardImpl::checked_index(c10::Device device) const {
  // The autograd engine asks the guard several times per backward node: the valid case stays
  // in line, without a call.
  const auto index = device.index();
  if (C10_LIKELY(
          device.type() == c10::DeviceType::PrivateUse1 && index >= 0 && index < device_count_)) {
    return index;
  }
  return checked_index_slow(device);
}

c10::DeviceIndex CpuGuardImpl::checked_index_slow(c10::Device device) const {
  TORCH_CHECK(
      device.type() == c10::DeviceType::PrivateUse1,
      "flagos device guard got a ",
      device.type(),
      " device");
  if (device.index() < 0) {
    return current_device;
  }
  check_device_index(device.index());
  return device.index();
}

c10::Device CpuGuardImpl::exchangeDevice(c10::Device device) const {
  const auto index = checked_index(device);
  const auto previous = current_device;
  current_device = index;
  return c10::Device(c10::DeviceType::PrivateUse1, previous);
}

c10::Device CpuGuardImpl::getDevice() const {
  return c10::Device(c10::DeviceType::PrivateUse1, current_device);
}

void CpuGuardImpl::setDevice(c10::Device device) const {
  current_device = checked_index(device);
}

void CpuGuardImpl::uncheckedSetDevice(c10::Device device) const noexcept {
  if (device.index() >= 0 && device.index() < device_count_) {
    current_device = device.index();
  }
}

c10::Stream CpuGuardImpl::getStream(c10::Device device) const {
  const auto index = checked_index(device);
  return c10::Stream(
      c10::Stream::UNSAFE,
      c10::Device(c10::DeviceType::PrivateUse1, index),
      current_streams[index]);
}

c10::Stream CpuGuardImpl::getDefaultStream(c10::Device device) const {
  return c10::Stream(
      c10::Stream::UNSAFE,
      c10::Device(c10::DeviceType::PrivateUse1, checked_index(device)),
      kDefaultStream);
}

c10::Stream CpuGuardImpl::getStreamFromGlobalPool(c10::Device device, bool) const {
  const auto slot = next_pool_stream.fetch_add(1, std::memory_order_relaxed) % kPoolSize;
  return c10::Stream(
      c10::Stream::UNSAFE,
      c10::Device(c10::DeviceType::PrivateUse1, checked_index(device)),
      static_cast<c10::StreamId>(1 + slot));
}

c10::Stream CpuGuardImpl::getNewStream(c10::Device device, int) const {
  return c10::Stream(
      c10::Stream::UNSAFE,
      c10::Device(c10::DeviceType::PrivateUse1, checked_index(device)),
      next_new_stream.fetch_add(1, std::memory_order_relaxed));
}

c10::Stream CpuGuardImpl::exchangeStream(c10::Stream stream) const {
  const auto index = checked_index(stream.device());
  const auto previous = current_streams[index];
  current_streams[index] = stream.id();
  return c10::Stream(
      c10::Stream::UNSAFE, c10::Device(c10::DeviceType::PrivateUse1, index), previous);
}

void CpuGuardImpl::destroyEvent(void* event, const c10::DeviceIndex) const noexcept {
  delete as_event(event);
}

void CpuGuardImpl::record(
    void** event,
    const c10::Stream& stream,
    const c10::DeviceIndex device_index,
    const c10::EventFlag flag) const {
  TORCH_CHECK(
      device_index == -1 || device_index == stream.device_index(),
      "Event device index ",
      static_cast<int>(device_index),
      " does not match recording stream's device index ",
      static_cast<int>(stream.device_index()),
      ".");
  checked_index(stream.device()); // a stream wrapped from an id may name a missing device
  if (*event == nullptr) {
    // PYTORCH_DEFAULT means "no timing", as for CUDA events.
    *event = new CpuEvent{stream.device_index(), flag == c10::EventFlag::BACKEND_DEFAULT};
  }
  auto* e = as_event(*event);
  e->recorded = true;
  e->when = std::chrono::steady_clock::now();
}

void CpuGuardImpl::block(void*, const c10::Stream& stream) const {
  // Work recorded before the event has already run: nothing to wait for.
  checked_index(stream.device());
}

bool CpuGuardImpl::queryEvent(void*) const {
  return true;
}

c10::DeviceIndex CpuGuardImpl::deviceCount() const noexcept {
  return device_count_;
}

bool CpuGuardImpl::queryStream(const c10::Stream& stream) const {
  checked_index(stream.device());
  return true;
}

void CpuGuardImpl::synchronizeStream(const c10::Stream& stream) const {
  checked_index(stream.device());
}

void CpuGuardImpl::synchronizeEvent(void*) const {}

void CpuGuardImpl::synchronizeDevice(const c10::DeviceIndex index) const {
  // Host work is done when it returns; the index is still checked, as CUDA's guard checks it.
  checked_index(c10::Device(c10::DeviceType::PrivateUse1, index));
}

double CpuGuardImpl::elapsedTime(void* start, void* end, const c10::DeviceIndex) const {
  auto* s = as_event(start);
  auto* e = as_event(end);
  TORCH_CHECK(
      s != nullptr && e != nullptr && s->recorded && e->recorded,
      "Both events must be recorded before calculating elapsed time.");
  TORCH_CHECK(
      s->timing && e->timing, "Both events must be created with argument 'enable_timing=True'.");
  // CUDA cannot time events of two devices either (cudaEventElapsedTime refuses them).
  TORCH_CHECK(
      s->device == e->device,
      "Both events must be recorded on the same device to calculate elapsed time; the start "
      "event was recorded on flagos:",
      static_cast<int>(s->device),
      " and the end event on flagos:",
      static_cast<int>(e->device));
  return std::chrono::duration<double, std::milli>(e->when - s->when).count();
}

} // namespace torch_fl::cpu
