#pragma once

#include "macros.h"

// The device check of a flagos operator call, shared by the boxed router and the unboxed fast
// kernels so both reject the same calls with the same message.
//
// Finds the flagos device of the call and rejects mixed devices the way native backends do:
// only 0-dim CPU tensors that are read, where CUDA's kernel takes them, (and CPU index tensors
// in Tensor?[] arguments) may join flagos ones; the 0-dim value of the fill operators and of
// index_put_, which CUDA's kernels read on the host or move first, may sit anywhere.

#include "runtime/accelerator.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string_view>

namespace torch_fl {

// Refuses a call whose tensors sit on two devices, in the words native backends use, naming the
// argument and the operator; `hint` (starting "; ") says how to fix the call.
[[noreturn]] FLAGOS_API void fail_mixed_devices(
    const c10::Device& device,
    const c10::Device& other,
    std::string_view argument,
    std::string_view op,
    std::string_view hint = {});

// Whether CUDA's kernel of this aten operator checks its tensors' devices exactly (device_check
// other than NoCheck in native_functions.yaml, which the build reads). False for operators the
// build could not place, and for every operator outside aten.
FLAGOS_API bool cuda_checks_devices(const c10::OperatorHandle& op);

class DeviceCheck {
 public:
  explicit DeviceCheck(const c10::OperatorHandle& op) : op_(op) {}

  // `arg` is the argument's index in the schema (named in the error message); `written`: the
  // call writes it (out=, in-place self), so a 0-dim CPU tensor may not stand in for a flagos
  // one there, as TensorIterator allows CPU scalars as inputs only.
  void see(const at::Tensor& t, uint16_t arg, bool cpu_allowed, bool written = false) {
    if (!t.defined()) {
      return;
    }
    const auto device = t.device();
    if (C10_LIKELY(device.type() == c10::DeviceType::PrivateUse1)) {
      if (C10_UNLIKELY(cpu_self_filled_) && !cpu_allowed && !is_host_read_value(t, arg) &&
          is_index_put_impl(op_.schema().operator_name())) {
        // index_put_ moves a 0-dim value to a cpu self; a longer flagos one meets it in
        // TensorIterator, which refuses. (fill_ and index_fill_ refuse it for its dimensions.)
        index_ = device.index();
        fail(c10::Device(c10::DeviceType::CPU), 0);
      }
      if (index_ < 0) {
        index_ = device.index();
      } else if (
          C10_UNLIKELY(device.index() != index_) && !is_host_read_value(t, arg) &&
          !is_moved_by_the_kernel(arg)) {
        fail(device, arg);
      }
      return;
    }
    if (device.type() == c10::DeviceType::CPU) {
      if (cpu_allowed || (t.dim() == 0 && !written && !refuses_host_scalar(arg)) ||
          is_scalars_list(arg) || cpu_self_filled_ || is_moved_by_the_kernel(arg)) {
        return;
      }
      if (is_filled_from_a_device_value(arg)) {
        // A cpu self filled from a flagos value: the call's other tensors (indices) are cpu.
        cpu_self_filled_ = true;
        return;
      }
    }
    if (!stray_) {
      stray_ = device;
      stray_arg_ = arg;
    }
  }

  void see_device(const c10::Device& device) {
    if (index_ < 0 && device.type() == c10::DeviceType::PrivateUse1 && device.index() >= 0) {
      index_ = device.index();
    }
  }

  void see_generator(const at::Generator& generator) {
    flagos_generator_ =
        flagos_generator_ || generator.device().type() == c10::DeviceType::PrivateUse1;
  }

  // The call's flagos device index (the current device when no argument names one).
  c10::DeviceIndex finish() {
    if (index_ < 0) {
      if (C10_UNLIKELY(stray_.has_value() && flagos_generator_)) {
        fail_generator(*stray_);
      }
      index_ = accelerator().guard().getDevice().index();
    }
    if (C10_UNLIKELY(stray_.has_value())) {
      fail(*stray_, stray_arg_);
    }
    return index_;
  }

 private:
  // CUDA's generated kernel wrappers check that every positional and out= tensor is on one
  // device, unless the operator is `device_check: NoCheck` (TensorIterator operators, which
  // take a 0-dim CPU tensor as a scalar): `index_select(x, 0, torch.tensor(1))` is refused.
  C10_NOINLINE bool refuses_host_scalar(uint16_t arg) const {
    const auto& args = op_.schema().arguments();
    return arg < args.size() && !args[arg].kwarg_only() && cuda_checks_devices(op_);
  }

  // The packed `scalars` of the _foreach_ operators (addcmul, addcdiv) are read on the host, so
  // native kernels take (and require) a CPU tensor there.
  C10_NOINLINE bool is_scalars_list(uint16_t arg) const {
    const auto& args = op_.schema().arguments();
    return arg < args.size() && args[arg].name() == "scalars" &&
           op_.schema().name().rfind("aten::_foreach_", 0) == 0;
  }

  // Operators whose native kernels take a 0-dim value tensor from any device: fill_.Tensor,
  // masked_fill_.Tensor and index_fill_.int_Tensor read it on the host (.item()), and
  // _index_put_impl_ (index_put_, `x[i] = v`) moves a one-element `values` to self's device
  // first. So on CUDA it may sit on another GPU, and a cpu tensor may be filled from a GPU
  // scalar; so on flagos. (Other operators refuse 0-dim tensors of another device, as CUDA's.)
  static bool takes_a_value_from_any_device(const c10::OperatorName& name) {
    return (name.overload_name == "Tensor" &&
            (name.name == "aten::fill_" || name.name == "aten::masked_fill_")) ||
           (name.overload_name == "int_Tensor" && name.name == "aten::index_fill_") ||
           is_index_put_impl(name);
  }

  static bool is_index_put_impl(const c10::OperatorName& name) {
    return name.overload_name.empty() && name.name == "aten::_index_put_impl_";
  }

  C10_NOINLINE bool is_host_read_value(const at::Tensor& t, uint16_t arg) const {
    const auto& args = op_.schema().arguments();
    return t.dim() == 0 && arg < args.size() &&
           (args[arg].name() == "value" || args[arg].name() == "values") &&
           takes_a_value_from_any_device(op_.schema().operator_name());
  }

  // bernoulli_.Tensor's probabilities: CPU's and CUDA's kernels move `p` to self's device
  // themselves, so it may sit on any device, whatever its shape.
  C10_NOINLINE bool is_moved_by_the_kernel(uint16_t arg) const {
    const auto& args = op_.schema().arguments();
    const auto& name = op_.schema().operator_name();
    return arg < args.size() && args[arg].name() == "p" && name.overload_name == "Tensor" &&
           name.name == "aten::bernoulli_";
  }

  // `cpu_tensor.fill_(flagos_scalar)` (or index_fill_, or `cpu_tensor[i] = flagos_scalar`) comes
  // here, the flagos value picking the kernel; CUDA's kernels fill a cpu tensor from a CUDA
  // scalar's value, so do these. masked_fill_ is not among them: CUDA's refuses a cpu self.
  C10_NOINLINE bool is_filled_from_a_device_value(uint16_t arg) const {
    const auto& name = op_.schema().operator_name();
    return arg == 0 && name.name != "aten::masked_fill_" && takes_a_value_from_any_device(name);
  }

  [[noreturn]] C10_NOINLINE void fail(const c10::Device& other, uint16_t arg) {
    // A cpu tensor indexed by flagos indices: what CUDA's index check says.
    TORCH_CHECK(
        !(arg == 0 && other.type() == c10::DeviceType::CPU && op_.schema().name() == "aten::index"),
        "indices should be either on cpu or on the same device as the indexed tensor (cpu)");
    fail_mixed_devices(
        c10::Device(c10::DeviceType::PrivateUse1, index_),
        other,
        op_.schema().arguments()[arg].name(),
        c10::toString(op_.schema().operator_name()));
  }

  // Only a flagos generator brought the call here: its tensors are all on another device.
  [[noreturn]] C10_NOINLINE void fail_generator(const c10::Device& tensors) {
    TORCH_CHECK(
        false,
        "Expected a '",
        c10::DeviceTypeName(tensors.type(), /*lower_case=*/true),
        "' device type for generator but found 'flagos' (",
        op_.schema().operator_name(),
        " got a flagos generator for tensors on ",
        tensors,
        "; draw with a generator of their device, or move them to flagos)");
  }

  const c10::OperatorHandle& op_;
  bool flagos_generator_ = false;
  c10::DeviceIndex index_ = -1;
  bool cpu_self_filled_ = false;
  std::optional<c10::Device> stray_;
  uint16_t stray_arg_ = 0;
};

} // namespace torch_fl
