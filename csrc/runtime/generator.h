#pragma once

#include "macros.h"

// flagos generators. Each wraps a native generator (CPU or CUDA Philox state) that the native
// kernels can consume; a flagos generator itself is never handed to a native kernel, which
// would reject it or re-enter the flagos backend.

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace torch_fl {

class FLAGOS_API FlagosGenerator final : public c10::GeneratorImpl {
 public:
  FlagosGenerator(c10::DeviceIndex index, at::Generator native);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

  const at::Generator& native() const {
    return native_;
  }

 private:
  FlagosGenerator* clone_impl() const override;
  at::Generator native_;
};

// The default generator of flagos:index (created on first use, lives for the process).
FLAGOS_API const at::Generator& default_generator(c10::DeviceIndex index);
// A new, independent generator on flagos:index.
FLAGOS_API at::Generator new_generator(c10::DeviceIndex index);
// The native generator a kernel may be handed in place of a flagos generator.
FLAGOS_API at::Generator native_generator_for(const at::Generator& flagos);

} // namespace torch_fl
