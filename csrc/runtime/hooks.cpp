#include "runtime/hooks.h"

#include "runtime/accelerator.h"
#include "runtime/generator.h"
#include "runtime/storage.h"

#include <ATen/core/CachingHostAllocator.h>

namespace torch_fl {
namespace {
c10::Device flagos(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::PrivateUse1, index);
}
} // namespace

bool FlagosHooks::isBuilt() const {
  return true;
}

bool FlagosHooks::isAvailable() const {
  return accelerator().device_count() > 0;
}

const at::Generator& FlagosHooks::getDefaultGenerator(c10::DeviceIndex device_index) const {
  return default_generator(device_index);
}

at::Generator FlagosHooks::getNewGenerator(c10::DeviceIndex device_index) const {
  return new_generator(device_index);
}

at::Device FlagosHooks::getDeviceFromPtr(void* data) const {
  return accelerator().device_from_ptr(data);
}

bool FlagosHooks::isPinnedPtr(const void* data) const {
  return accelerator().is_pinned_ptr(data);
}

at::Allocator* FlagosHooks::getPinnedMemoryAllocator() const {
  return accelerator().host_allocator();
}

bool FlagosHooks::hasPrimaryContext(c10::DeviceIndex device_index) const {
  return device_index >= 0 && device_index < accelerator().device_count();
}

void FlagosHooks::resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const {
  resize_storage_bytes(storage.unsafeGetStorageImpl(), newsize);
}

c10::DeviceIndex FlagosHooks::deviceCount() const {
  return accelerator().device_count();
}

void FlagosHooks::setCurrentDevice(c10::DeviceIndex device) const {
  accelerator().guard().setDevice(flagos(device));
}

c10::DeviceIndex FlagosHooks::getCurrentDevice() const {
  return accelerator().guard().getDevice().index();
}

c10::DeviceIndex FlagosHooks::exchangeDevice(c10::DeviceIndex device) const {
  return accelerator().guard().exchangeDevice(flagos(device)).index();
}

c10::DeviceIndex FlagosHooks::maybeExchangeDevice(c10::DeviceIndex device) const {
  return exchangeDevice(device);
}

} // namespace torch_fl
