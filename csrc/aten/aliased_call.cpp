#include "aten/aliased_call.h"

#include "aten/alias.h"
#include "runtime/accelerator.h"
#include "runtime/generator.h"

#include <c10/core/DeviceGuard.h>
#include <c10/util/SmallVector.h>

#include <optional>

namespace torch_fl {
namespace {

bool is_flagos(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

bool is_written(const c10::Argument& arg) {
  return arg.alias_info() != nullptr && arg.alias_info()->isWrite();
}

bool is_optional_generator(const c10::Argument& arg) {
  const auto& type = arg.type();
  if (type->kind() != c10::TypeKind::OptionalType) {
    return false;
  }
  return type->castRaw<c10::OptionalType>()->getElementType()->kind() ==
      c10::TypeKind::GeneratorType;
}

// Finds the flagos device of the call and rejects mixed devices the way native backends do:
// only 0-dim CPU tensors (and CPU index tensors in Tensor?[] arguments) may join flagos ones.
class DeviceCheck {
 public:
  explicit DeviceCheck(const c10::OperatorHandle& op) : op_(op) {}

  void see(const at::Tensor& t, const c10::Argument& arg, bool cpu_allowed) {
    if (!t.defined()) {
      return;
    }
    const auto device = t.device();
    if (device.type() == c10::DeviceType::PrivateUse1) {
      if (index_ < 0) {
        index_ = device.index();
      } else if (device.index() != index_) {
        fail(device, arg);
      }
      return;
    }
    if (device.type() == c10::DeviceType::CPU && (cpu_allowed || t.dim() == 0)) {
      return;
    }
    if (!stray_) {
      stray_ = device;
      stray_arg_ = arg.name();
    }
  }

  void see_device(const c10::Device& device) {
    if (index_ < 0 && device.type() == c10::DeviceType::PrivateUse1 && device.index() >= 0) {
      index_ = device.index();
    }
  }

  c10::DeviceIndex finish() {
    if (index_ < 0) {
      index_ = accelerator().guard().getDevice().index();
    }
    if (stray_) {
      TORCH_CHECK(
          false,
          "Expected all tensors to be on the same device, but found at least two devices, flagos:",
          static_cast<int>(index_),
          " and ",
          *stray_,
          "! (argument '",
          stray_arg_,
          "' of ",
          op_.schema().operator_name(),
          ")");
    }
    return index_;
  }

 private:
  [[noreturn]] void fail(const c10::Device& other, const c10::Argument& arg) {
    TORCH_CHECK(
        false,
        "Expected all tensors to be on the same device, but found at least two devices, flagos:",
        static_cast<int>(index_),
        " and ",
        other,
        "! (argument '",
        arg.name(),
        "' of ",
        op_.schema().operator_name(),
        ")");
  }

  const c10::OperatorHandle& op_;
  c10::DeviceIndex index_ = -1;
  std::optional<c10::Device> stray_;
  std::string stray_arg_;
};

struct WrittenTensor {
  at::Tensor original;
  at::Tensor alias;
};

// Finds the argument whose alias set a written result shares (in-place and out= results).
std::optional<size_t> written_argument_for(const c10::FunctionSchema& schema, size_t ret) {
  const auto* info = schema.returns()[ret].alias_info();
  if (info == nullptr || !info->isWrite()) {
    return std::nullopt;
  }
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* arg_info = args[i].alias_info();
    if (arg_info != nullptr && arg_info->isWrite() &&
        arg_info->beforeSets() == info->beforeSets()) {
      return i;
    }
  }
  return std::nullopt;
}

} // namespace

void call_native_aliased(
    const c10::OperatorHandle& op,
    torch::jit::Stack* stack,
    c10::DispatchKey native_key) {
  const auto& schema = op.schema();
  const auto& args = schema.arguments();
  const size_t num_args = args.size();
  const size_t begin = stack->size() - num_args;
  auto& accel = accelerator();

  DeviceCheck devices(op);
  for (size_t i = 0; i < num_args; ++i) {
    const auto& v = (*stack)[begin + i];
    if (v.isTensor()) {
      devices.see(v.toTensor(), args[i], false);
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        devices.see(t, args[i], false);
      }
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        if (t.has_value()) {
          devices.see(*t, args[i], true);
        }
      }
    } else if (v.isDevice()) {
      devices.see_device(v.toDevice());
    }
  }
  const c10::DeviceIndex index = devices.finish();

  c10::SmallVector<c10::IValue, 8> originals(stack->begin() + begin, stack->end());
  c10::SmallVector<WrittenTensor, 2> written;
  for (size_t i = 0; i < num_args; ++i) {
    auto& v = (*stack)[begin + i];
    const bool writes = is_written(args[i]);
    if (v.isTensor()) {
      const auto& t = v.toTensor();
      if (is_flagos(t)) {
        auto alias = native_alias(t, writes);
        if (writes) {
          written.push_back({t, alias});
        }
        v = std::move(alias);
      }
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> aliases;
      const auto list = v.toTensorList();
      aliases.reserve(list.size());
      for (const at::Tensor& t : list) {
        if (is_flagos(t)) {
          auto alias = native_alias(t, writes);
          if (writes) {
            written.push_back({t, alias});
          }
          aliases.push_back(std::move(alias));
        } else {
          aliases.push_back(t);
        }
      }
      v = std::move(aliases);
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> aliases;
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        aliases.push_back(t.has_value() && is_flagos(*t) ? native_alias(*t) : t);
      }
      v = std::move(aliases);
    } else if (v.isDevice()) {
      const auto device = v.toDevice();
      if (device.type() == c10::DeviceType::PrivateUse1) {
        v = accel.native_device(device.index() >= 0 ? device.index() : index);
      }
    } else if (v.isGenerator()) {
      const auto& gen = v.toGenerator();
      if (gen.device().type() == c10::DeviceType::PrivateUse1) {
        v = native_generator_for(gen);
      }
    } else if (v.isNone() && is_optional_generator(args[i])) {
      // The kernel would draw from the native default generator; flagos RNG state lives in
      // the flagos default generator of this device.
      v = native_generator_for(default_generator(index));
    }
  }

  TORCH_CHECK_NOT_IMPLEMENTED(
      op.hasKernelForDispatchKey(native_key),
      schema.operator_name(),
      " cannot run on flagos: its route needs a ",
      c10::toString(native_key),
      " kernel and the installed torch has none for it");
  {
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, index));
    op.redispatchBoxed(c10::DispatchKeySet(native_key), stack);
  }

  for (const auto& w : written) {
    sync_from_alias(w.original, w.alias);
  }

  const size_t num_returns = schema.returns().size();
  const size_t rbegin = stack->size() - num_returns;
  StorageRelabeler relabeler(index);
  for (size_t r = 0; r < num_returns; ++r) {
    auto& v = (*stack)[rbegin + r];
    if (auto arg = written_argument_for(schema, r)) {
      v = originals[*arg];
    } else if (v.isTensor()) {
      const auto& t = v.toTensor();
      if (t.defined() && t.device().type() == accel.native_device_type()) {
        v = flagos_from_native(t, relabeler);
      }
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> results;
      const auto list = v.toTensorList();
      results.reserve(list.size());
      for (const at::Tensor& t : list) {
        results.push_back(
            t.defined() && t.device().type() == accel.native_device_type()
                ? flagos_from_native(t, relabeler)
                : t);
      }
      v = std::move(results);
    }
  }
}

} // namespace torch_fl
