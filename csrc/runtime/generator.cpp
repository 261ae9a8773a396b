#include "runtime/generator.h"

#include "runtime/accelerator.h"
#include "runtime/fork_safe_mutex.h"

#include <c10/util/CallOnce.h>
#include <c10/util/Exception.h>

#include <deque>
#include <memory>
#include <mutex>

namespace torch_fl {

FlagosGenerator::FlagosGenerator(c10::DeviceIndex index, at::Generator native)
    : c10::GeneratorImpl(
          c10::Device(c10::DeviceType::PrivateUse1, index),
          c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      native_(std::move(native)) {}

// Each forwarder takes the native generator's lock, which is the one native kernels hold
// while drawing numbers, so state reads and writes never race a kernel.
void FlagosGenerator::set_current_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(native_.unsafeGetGeneratorImpl()->mutex_);
  native_.set_current_seed(seed);
}

// A CPU generator (the cpu accelerator's) is an mt19937 without a Philox offset. torch pickles
// and deep-copies every non-CPU generator as (seed, offset, state) and restores the offset before
// the state, so the offset reads as 0 and only 0 is accepted back; the state carries the rest.
void FlagosGenerator::set_offset(uint64_t offset) {
  std::lock_guard<std::mutex> lock(native_.unsafeGetGeneratorImpl()->mutex_);
  if (native_.device().type() == c10::DeviceType::CPU) {
    TORCH_CHECK(
        offset == 0,
        "set_offset(",
        offset,
        "): flagos generators on the cpu accelerator are CPU's mt19937, which has no Philox "
        "offset (get_offset() reports 0 and only 0 is accepted). Save and restore a generator's "
        "position with get_state() and set_state(), as pickle and copy.deepcopy do.");
    return;
  }
  native_.set_offset(offset);
}

uint64_t FlagosGenerator::get_offset() const {
  std::lock_guard<std::mutex> lock(native_.unsafeGetGeneratorImpl()->mutex_);
  if (native_.device().type() == c10::DeviceType::CPU) {
    return 0;
  }
  return native_.get_offset();
}

uint64_t FlagosGenerator::current_seed() const {
  std::lock_guard<std::mutex> lock(native_.unsafeGetGeneratorImpl()->mutex_);
  return native_.current_seed();
}

uint64_t FlagosGenerator::seed() {
  std::lock_guard<std::mutex> lock(native_.unsafeGetGeneratorImpl()->mutex_);
  return native_.seed();
}

void FlagosGenerator::set_state(const c10::TensorImpl& new_state) {
  std::lock_guard<std::mutex> lock(native_.unsafeGetGeneratorImpl()->mutex_);
  native_.unsafeGetGeneratorImpl()->set_state(new_state);
}

c10::intrusive_ptr<c10::TensorImpl> FlagosGenerator::get_state() const {
  std::lock_guard<std::mutex> lock(native_.unsafeGetGeneratorImpl()->mutex_);
  return native_.unsafeGetGeneratorImpl()->get_state();
}

FlagosGenerator* FlagosGenerator::clone_impl() const {
  std::lock_guard<std::mutex> lock(native_.unsafeGetGeneratorImpl()->mutex_);
  return new FlagosGenerator(device().index(), native_.clone());
}

const at::Generator& default_generator(c10::DeviceIndex index) {
  // Stable addresses; never destroyed, as the accelerator whose generators they wrap.
  static auto& generators = *new std::deque<std::unique_ptr<at::Generator>>();
  static auto& mutex = *new ForkSafeMutex(); // first made by a random operator: no lock held
  index = resolve_device_index(index);
  std::lock_guard lock(mutex);
  if (generators.size() <= static_cast<size_t>(index)) {
    generators.resize(index + 1);
  }
  auto& slot = generators[index];
  if (!slot) {
    slot = std::make_unique<at::Generator>(
        at::make_generator<FlagosGenerator>(index, accelerator().default_native_generator(index)));
  }
  return *slot;
}

at::Generator new_generator(c10::DeviceIndex index) {
  index = resolve_device_index(index);
  return at::make_generator<FlagosGenerator>(index, accelerator().make_native_generator(index));
}

at::Generator native_generator_for(const at::Generator& flagos) {
  auto* impl = dynamic_cast<FlagosGenerator*>(flagos.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "expected a flagos generator, got one for ", flagos.device());
  return impl->native();
}

} // namespace torch_fl
