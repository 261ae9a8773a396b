#include "aten/aliased_call.h"

#include "aten/alias.h"
#include "aten/autocast_mirror.h"
#include "aten/autograd_boundary.h"
#include "aten/device_check.h"
#include "aten/host_copy.h"
#include "aten/nested/nested_alias.h"
#include "aten/sparse/sparse_alias.h"
#include "runtime/accelerator.h"
#include "runtime/generator.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/as_strided_ops.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <optional>

namespace torch_fl {
namespace {

bool is_flagos(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// Batch norm's running statistics, which these kernels update in place although the schema
// does not mark them written (torch's own legacy; the `_legit` forms mark them). Host copies
// of them must go back like any written argument's.
bool updated_without_annotation(const c10::FunctionSchema& schema, const c10::Argument& arg) {
  if (arg.name() != "running_mean" && arg.name() != "running_var") {
    return false;
  }
  const auto& name = schema.name();
  return name == "aten::native_batch_norm" || name == "aten::cudnn_batch_norm" ||
         name == "aten::miopen_batch_norm";
}

bool is_written(const c10::FunctionSchema& schema, const c10::Argument& arg) {
  return (arg.alias_info() != nullptr && arg.alias_info()->isWrite()) ||
         updated_without_annotation(schema, arg);
}

c10::TypePtr unwrap_optional(const c10::TypePtr& type, bool* optional) {
  *optional = false;
  if (type->kind() == c10::TypeKind::OptionalType) {
    *optional = true;
    return type->castRaw<c10::OptionalType>()->getElementType();
  }
  return type;
}

std::optional<ArgPlan::Kind> kind_of(const c10::TypePtr& type) {
  bool optional = false;
  const auto inner = unwrap_optional(type, &optional);
  switch (inner->kind()) {
    case c10::TypeKind::TensorType:
      return ArgPlan::Kind::Tensor;
    case c10::TypeKind::DeviceObjType:
      return ArgPlan::Kind::Device;
    case c10::TypeKind::GeneratorType:
      return optional ? ArgPlan::Kind::OptionalGenerator : ArgPlan::Kind::Generator;
    case c10::TypeKind::ListType: {
      bool opt_elem = false;
      const auto elem =
          unwrap_optional(inner->castRaw<c10::ListType>()->getElementType(), &opt_elem);
      if (elem->kind() == c10::TypeKind::TensorType) {
        return opt_elem ? ArgPlan::Kind::OptionalTensorList : ArgPlan::Kind::TensorList;
      }
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

// `mirror` receives the host span of a written tensor the Copy mapping mirrors (host_copy.h).
at::Tensor to_native(
    const at::Tensor& t, bool writes, Mapping mapping, c10::Storage* mirror = nullptr) {
  if (mapping == Mapping::Alias) {
    if (t.is_nested()) {
      return native_nested_alias(t); // kernels write into its buffer, never resize it
    }
    return t.layout() == c10::kSparse ? native_sparse_alias(t, writes) : native_alias(t, writes);
  }
  at::NoGradGuard copy_not_recorded; // a call joining histories records the copy itself
  auto copy = host_copy_for_kernel(t, writes);
  if (mirror != nullptr) {
    *mirror = std::move(copy.mirror);
  }
  return std::move(copy.tensor);
}

uint32_t version_of(const at::Tensor& t) {
  const auto& counter = t.unsafeGetTensorImpl()->version_counter();
  return counter.enabled() ? counter.current_version() : 0;
}

at::Generator generator_for(const at::Generator& flagos, Mapping mapping) {
  auto native = native_generator_for(flagos);
  if (mapping == Mapping::Copy && native.device().type() != c10::DeviceType::CPU) {
    // A CPU kernel cannot draw from device RNG state; it uses the CPU default generator.
    return at::detail::getDefaultCPUGenerator();
  }
  return native;
}

// A result of a view operator without an ADInplaceOrView kernel (a custom operator declared
// `Tensor(a) x -> Tensor(a)`) shares the argument's memory but, made by a kernel from the
// argument's native alias, is no autograd view of the caller's tensor: an in-place update of
// one would be missing from the other's history. On CPU such a kernel's own view operators see
// the caller's tensor and make the view; here it is made again over the caller's tensor, through
// the autograd and view keys the thread has not excluded (none in inference mode), so that it is
// a view, with a gradient, as on CPU. Not for results that are copies (the Copy mapping) or of
// another dtype or layout.
at::Tensor as_view_of_argument(const PreparedCall& call, int16_t arg, at::Tensor result) {
  const at::Tensor* source = nullptr;
  for (const auto& view_source : call.view_sources) {
    if (view_source.index == arg) {
      source = &view_source.source;
    }
  }
  const auto excluded = c10::impl::tls_local_dispatch_key_set().excluded_;
  if (source == nullptr || !result.defined() || result.layout() != c10::kStrided ||
      source->layout() != c10::kStrided || result.is_nested() || source->is_nested() ||
      result.dtype() != source->dtype() || !result.has_storage() ||
      result.storage().data() != source->storage().data() ||
      excluded.has(c10::DispatchKey::ADInplaceOrView)) {
    return result;
  }
  const auto keys = c10::DispatchKeySet(
                        {c10::DispatchKey::AutogradPrivateUse1,
                         c10::DispatchKey::ADInplaceOrView,
                         c10::DispatchKey::PrivateUse1}) -
                    excluded;
  return at::_ops::as_strided::redispatch(
      keys, *source, result.sym_sizes(), result.sym_strides(), result.sym_storage_offset());
}

// The caller's tensor when the kernel returned the very tensor it was given for argument `arg`.
const at::Tensor* argument_returned(
    const PreparedCall& call, int16_t arg, const at::Tensor& result) {
  for (const auto& view_source : call.view_sources) {
    if (view_source.index == arg && view_source.given.defined() &&
        view_source.given.unsafeGetTensorImpl() == result.unsafeGetTensorImpl()) {
      return &view_source.source;
    }
  }
  return nullptr;
}

// TorchScript passes a Tensor?[] argument it built from tensors alone (`x[i] = v`) as a
// List[Tensor], which the dispatcher's unboxing accepts as well.
c10::List<std::optional<at::Tensor>> as_optional_tensor_list(const c10::IValue& v) {
  c10::List<std::optional<at::Tensor>> list;
  for (const c10::IValue& e : v.toListRef()) {
    list.push_back(e.isNone() ? std::nullopt : std::optional<at::Tensor>(e.toTensor()));
  }
  return list;
}

} // namespace

ArgPlan ArgPlan::build(const c10::OperatorHandle& op) {
  const auto& schema = op.schema();
  ArgPlan plan;
  const auto& args = schema.arguments();
  plan.num_args = static_cast<uint16_t>(args.size());
  plan.num_returns = static_cast<uint16_t>(schema.returns().size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (auto kind = kind_of(args[i].type())) {
      const bool written = is_written(schema, args[i]);
      plan.args.push_back(Arg{static_cast<uint16_t>(i), *kind, written});
      plan.has_written = plan.has_written || written;
    }
  }
  const bool views_made_above = op.hasKernelForDispatchKey(c10::DispatchKey::ADInplaceOrView);
  for (const auto& ret : schema.returns()) {
    int16_t found = -1;
    int16_t view_of = -1;
    const auto* info = ret.alias_info();
    for (size_t i = 0; info != nullptr && i < args.size(); ++i) {
      const auto* arg_info = args[i].alias_info();
      if (arg_info == nullptr || arg_info->beforeSets() != info->beforeSets()) {
        continue;
      }
      if (info->isWrite() && arg_info->isWrite()) {
        found = static_cast<int16_t>(i);
        break;
      }
      if (!info->isWrite() && !arg_info->isWrite() && !views_made_above) {
        for (auto& a : plan.args) {
          if (a.index == i && a.kind == Kind::Tensor) {
            a.view_source = true;
            view_of = static_cast<int16_t>(i);
          }
        }
        break;
      }
    }
    plan.returns_arg.push_back(found);
    plan.returns_view_of.push_back(view_of);
    plan.has_views = plan.has_views || view_of >= 0;
  }
  return plan;
}

void prepare_call(
    const c10::OperatorHandle& op,
    const ArgPlan& plan,
    torch::jit::Stack* stack,
    Mapping mapping,
    PreparedCall& call) {
  const size_t begin = stack->size() - plan.num_args;
  call.mapping = mapping;

  DeviceCheck devices(op);
  for (const auto& a : plan.args) {
    const auto& v = (*stack)[begin + a.index];
    switch (a.kind) {
      case ArgPlan::Kind::Tensor:
        if (v.isTensor()) {
          devices.see(v.toTensor(), a.index, false, a.written);
        }
        break;
      case ArgPlan::Kind::TensorList:
        for (const at::Tensor& t : v.toTensorList()) {
          devices.see(t, a.index, false, a.written);
        }
        break;
      case ArgPlan::Kind::OptionalTensorList:
        if (C10_UNLIKELY(!v.isOptionalTensorList())) {
          (*stack)[begin + a.index] = as_optional_tensor_list(v); // `v` is this slot
        }
        for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
          if (t.has_value()) {
            devices.see(*t, a.index, true);
          }
        }
        break;
      case ArgPlan::Kind::Device:
        if (v.isDevice()) {
          devices.see_device(v.toDevice());
        }
        break;
      case ArgPlan::Kind::Generator:
      case ArgPlan::Kind::OptionalGenerator:
        if (v.isGenerator()) {
          devices.see_generator(v.toGenerator());
        }
        break;
      default:
        break;
    }
  }
  const c10::DeviceIndex index = devices.finish();
  call.index = index;
  if (C10_UNLIKELY(!call.defer_read_aliases && autograd_boundary::wanted(plan, *stack, begin))) {
    call.autograd = true;
    call.release_aliases = false; // the aliases carry history now
  }

  // Aliases over one flagos storage share an alias storage when the call writes (see
  // SharedAliasStorage); copies are separate memory either way.
  std::optional<SharedAliasStorage> shared;
  c10::SmallVector<at::Tensor, 4> shared_originals;
  if (plan.has_written && mapping == Mapping::Alias) {
    shared.emplace();
    shared_originals.reserve(plan.args.size());
  }
  for (const auto& a : plan.args) {
    auto& v = (*stack)[begin + a.index];
    if (a.written) {
      call.written_args.emplace_back(a.index, v);
    }
    const bool view_source = a.view_source && v.isTensor() && is_flagos(v.toTensor());
    if (view_source) {
      call.view_sources.push_back({a.index, v.toTensor()});
    }
    switch (a.kind) {
      case ArgPlan::Kind::Tensor: {
        if (!v.isTensor()) {
          break;
        }
        const auto& t = v.toTensor();
        if (is_flagos(t) && (a.written || !call.defer_read_aliases)) {
          c10::Storage mirror;
          auto mapped = to_native(t, a.written, mapping, &mirror);
          if (C10_UNLIKELY(call.autograd)) {
            autograd_boundary::join_argument(mapped, t, a.written, mapping == Mapping::Copy);
          }
          if (a.written) {
            call.written.push_back({t, mapped, version_of(mapped), std::move(mirror)});
          } else if (call.release_aliases) {
            call.read.push_back(mapped);
          }
          if (shared) {
            // The stack slot will hold the alias, and apply() may replace it there; the flagos
            // tensor is kept alive until then.
            shared_originals.push_back(t);
            v = std::move(mapped);
            shared->add_replaceable(shared_originals.back(), v.toTensor(), a.written);
          } else {
            v = std::move(mapped);
          }
        }
        break;
      }
      case ArgPlan::Kind::TensorList: {
        const auto list = v.toTensorList();
        c10::List<at::Tensor> mapped_list;
        mapped_list.reserve(list.size());
        for (const at::Tensor& t : list) {
          if (is_flagos(t)) {
            c10::Storage mirror;
            auto mapped = to_native(t, a.written, mapping, &mirror);
            if (C10_UNLIKELY(call.autograd)) {
              autograd_boundary::join_argument(mapped, t, a.written, mapping == Mapping::Copy);
            }
            if (shared && a.written) {
              shared->add(t, mapped, a.written);
            }
            if (a.written) {
              call.written.push_back({t, mapped, version_of(mapped), std::move(mirror)});
            }
            mapped_list.push_back(std::move(mapped));
          } else {
            mapped_list.push_back(t);
          }
        }
        v = std::move(mapped_list);
        if (shared && !a.written) {
          // Read elements, replaceable in the list (an element that is also the out= tensor
          // gets its alias).
          for (size_t i = 0; i < list.size(); ++i) {
            if (is_flagos(list.get(i))) {
              shared->add_list_element(list.get(i), v, i);
            }
          }
        }
        break;
      }
      case ArgPlan::Kind::OptionalTensorList: {
        c10::List<std::optional<at::Tensor>> mapped_list;
        for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
          if (t.has_value() && is_flagos(*t)) {
            auto mapped = to_native(*t, false, mapping);
            if (shared) {
              shared->add(*t, mapped, false);
            }
            mapped_list.push_back(std::move(mapped));
          } else {
            mapped_list.push_back(t);
          }
        }
        v = std::move(mapped_list);
        break;
      }
      case ArgPlan::Kind::Device: {
        if (!v.isDevice()) {
          break;
        }
        auto device = v.toDevice();
        if (device.type() == c10::DeviceType::PrivateUse1) {
          if (device.index() < 0) {
            device = accelerator().guard().getDevice(); // as torch's factories read "flagos"
          }
          if (mapping == Mapping::Alias) {
            v = accelerator().native_device(device.index());
          } else {
            v = c10::Device(c10::DeviceType::CPU);
          }
        }
        call.result_device = device;
        break;
      }
      case ArgPlan::Kind::Generator:
      case ArgPlan::Kind::OptionalGenerator: {
        if (v.isGenerator()) {
          const auto& gen = v.toGenerator();
          TORCH_CHECK(
              gen.device().type() == c10::DeviceType::PrivateUse1,
              "Expected a 'flagos' device type for generator but found '",
              gen.device().type(),
              "'");
          v = generator_for(gen, mapping);
        } else if (v.isNone()) {
          // The kernel would draw from the native default generator; flagos RNG state lives
          // in the flagos default generator of this device.
          v = generator_for(default_generator(index), mapping);
        }
        break;
      }
    }
    if (view_source && v.isTensor() && !is_flagos(v.toTensor())) {
      call.view_sources.back().given = v.toTensor();
    }
  }
  if (shared) {
    shared->apply();
  }
}

void finish_call(
    const c10::OperatorHandle& op,
    const ArgPlan& plan,
    torch::jit::Stack* stack,
    PreparedCall& call) {
  for (const auto& w : call.written) {
    // A kernel that updates its argument in place through an operator of its own (a Python
    // kernel of a custom operator: `x.add_(1)`) bumps the mapped tensor's version; the caller's
    // tensor must show the update too, or autograd misses a modified saved tensor. (ATen's
    // in-place operators are bumped above the device, by ADInplaceOrView, not here.)
    for (uint32_t v = w.mapped_version, now = version_of(w.mapped); v < now; ++v) {
      w.original.unsafeGetTensorImpl()->bump_version();
    }
    if (call.mapping == Mapping::Alias) {
      if (w.original.is_nested()) {
        continue; // written through the shared buffer; its metadata does not change
      }
      if (w.original.layout() == c10::kSparse) {
        sync_sparse_from_alias(w.original, w.mapped);
      } else {
        sync_from_alias(w.original, w.mapped);
      }
      if (C10_UNLIKELY(call.autograd)) {
        autograd_boundary::join_written(w.original, w.mapped, /*copied=*/false);
      }
    } else {
      // The update was counted above (or by ADInplaceOrView for an ATen operator); writing
      // it back is not another one.
      at::AutoDispatchBelowADInplaceOrView not_versioned;
      write_back_host_copy(w.original, w.mapped, w.mirror);
      if (C10_UNLIKELY(call.autograd)) {
        autograd_boundary::join_written(w.original, w.mapped, /*copied=*/true);
      }
    }
  }

  const auto native_type =
      call.mapping == Mapping::Alias ? accelerator().native_device_type() : c10::DeviceType::CPU;
  const size_t rbegin = stack->size() - plan.num_returns;
  // A Device argument names where the results go (`empty_like(sparse, device="flagos:1")`): a
  // flagos device, or another, where they are handed over as they are.
  const auto& requested = call.result_device;
  const bool results_on_flagos = !requested || requested->type() == c10::DeviceType::PrivateUse1;
  const c10::DeviceIndex result_index =
      requested && results_on_flagos ? requested->index() : call.index;
  const c10::Device flagos(c10::DeviceType::PrivateUse1, result_index);
  ResultRelabeler to_flagos(result_index, native_type, call.relabel_in_place);
  auto relabel = [&](at::Tensor t) -> at::Tensor {
    if (C10_UNLIKELY(!results_on_flagos)) {
      return !t.defined() || t.device() == *requested ? t : t.to(*requested);
    }
    if (call.mapping == Mapping::Copy && t.defined() && t.device().type() == native_type) {
      at::NoGradGuard copy_not_recorded; // a call joining histories records the copy itself
      return device_copy_of_result(t, flagos);
    }
    if (t.defined() && t.layout() == c10::kSparse && t.device().type() == native_type) {
      return flagos_sparse_from_native(t, result_index);
    }
    if (t.defined() && t.is_nested() && t.device().type() == native_type) {
      return flagos_nested_from_native(t, result_index);
    }
    return to_flagos(std::move(t));
  };
  for (size_t r = 0; r < plan.num_returns; ++r) {
    auto& v = (*stack)[rbegin + r];
    if (const int16_t arg = plan.returns_arg[r]; arg >= 0) {
      for (auto& [index, original] : call.written_args) {
        if (index == arg) {
          v = original;
          break;
        }
      }
    } else if (v.isTensor()) {
      const int16_t view_of = plan.has_views ? plan.returns_view_of[r] : int16_t{-1};
      if (view_of >= 0) {
        if (const auto* caller = argument_returned(call, view_of, v.toTensor())) {
          v = *caller;
          continue;
        }
      }
      autograd_boundary::ResultHistory history;
      if (C10_UNLIKELY(call.autograd)) {
        history = autograd_boundary::history_of(v.toTensor());
      }
      v = relabel(std::move(v).toTensor());
      if (view_of >= 0) {
        const auto* relabelled = v.toTensor().unsafeGetTensorImpl();
        v = as_view_of_argument(call, view_of, std::move(v).toTensor());
        if (v.toTensor().unsafeGetTensorImpl() != relabelled) {
          continue; // an autograd view of the argument: its history is the argument's
        }
      }
      if (C10_UNLIKELY(static_cast<bool>(history))) {
        autograd_boundary::join_result(
            v.toTensor(), std::move(history), call.mapping == Mapping::Copy);
      }
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> results;
      auto list = std::move(v).toTensorList();
      results.reserve(list.size());
      // A list only this call holds gives its tensors up, so fresh ones can be re-labelled in
      // place or taken over (a tensor still referenced elsewhere only shares its memory).
      const bool sole_owner = list.use_count() == 1;
      for (size_t i = 0; i < list.size(); ++i) {
        results.push_back(relabel(sole_owner ? list.extract(i) : list.get(i)));
      }
      v = std::move(results);
    }
  }
}

void call_native(
    const c10::OperatorHandle& op,
    const ArgPlan& plan,
    torch::jit::Stack* stack,
    c10::DispatchKey native_key,
    Mapping mapping,
    bool has_kernel) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      has_kernel,
      op.schema().operator_name(),
      " cannot run on flagos: its route needs a ",
      c10::toString(native_key),
      " kernel and the installed torch has none for it");
  PreparedCall call;
  call.relabel_in_place = true;
  call.release_aliases = mapping == Mapping::Alias;
  prepare_call(op, plan, stack, mapping, call);
  {
    DeviceScope scope(call.index);
    AutocastAsFlagos autocast(c10::dispatchKeyToDeviceType(native_key));
    op.redispatchBoxed(c10::DispatchKeySet(native_key), stack);
  }
  finish_call(op, plan, stack, call);
  if (call.release_aliases) {
    for (auto& alias : call.read) {
      release_alias(alias);
    }
    for (auto& w : call.written) {
      release_alias(w.mapped);
    }
  }
}

void call_native_aliased(
    const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::DispatchKey native_key) {
  const auto plan = ArgPlan::build(op);
  call_native(
      op, plan, stack, native_key, Mapping::Alias, op.hasComputedKernelForDispatchKey(native_key));
}

} // namespace torch_fl
