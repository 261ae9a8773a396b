#pragma once

#include "macros.h"

// Unboxed fast kernels: one template, instantiated per operator from its at::_ops struct,
// that runs the accelerator's zero-copy route without boxing.
//
// The boxed router costs a stack of IValues built by the dispatcher, unpacked again by the
// target kernel's boxed wrapper, and a second pass over the stack for the results. For hot
// operators FastKernel<at::_ops::X> is registered at PrivateUse1 instead; on every call it
//   1. reads the operator's route (OpEntry::route, which tables, FLAGOS_OP_* and
//      torch_fl.routing.set_route change at run time). Unless it is the route fast kernels serve
//      (routing::fast_route(): the zero-copy route, closed while FLAGOS_LOG is on or the copy
//      test hook is set), the arguments are boxed and handed to routing::route_call, so every
//      other route, strict mode and logging behave exactly as for a boxed operator;
//   2. counts the call and opens the `flagos::<route>` profiler event, as route_call does;
//   3. checks devices with the router's DeviceCheck (same rules, same messages), builds native
//      aliases of the flagos tensor arguments (resizable for written ones; none for a direct
//      kernel on a device accelerator, see FastKernel), switches to the call's device when
//      needed and calls at::_ops::X::redispatch on the native key (CPU or CUDA) directly;
//   4. syncs written arguments back (out= resizes included), returns the caller's own tensor
//      for in-place/out= results and re-labels fresh results as flagos:index.
// This is what prepare_call / redispatchBoxed / finish_call do on a stack (aliased_call.cpp);
// the two must stay in step.
//
// Argument types are mapped by Mapped<T>: const Tensor&, Tensor&, optional<Tensor>, TensorList,
// ITensorListRef and List<optional<Tensor>> are aliased; other types pass through. Generator
// and Device arguments need the boxed path's mapping and are rejected at compile time.

#include "aten/alias.h"
#include "aten/device_check.h"
#include "aten/fast/registry.h"
#include "aten/routing/router.h"
#include "runtime/accelerator.h"

#include <ATen/core/IListRef.h>
#include <ATen/core/List.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/record_function.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace torch_fl::fast {

// ---- per-process and per-operator facts ----

// The native dispatch key fast kernels call and the device type of its tensors.
struct Target {
  c10::DispatchKeySet keyset;
  c10::DeviceType native_type;
  // Kernels marked direct take the flagos tensors themselves (device accelerators only).
  bool direct;
};
FLAGOS_API Target make_target();
inline const Target& target() {
  static const Target t = make_target();
  return t;
}

// Resolved on an operator's first fast call.
struct OpInfo {
  routing::OpEntry* entry = nullptr;
  uint64_t written = 0; // bit i: schema argument i is written (Tensor(a!))
  bool usable = false;  // the native kernel exists and the C++ signature matches the schema
};
FLAGOS_API OpInfo make_info(const char* name, const char* overload, size_t num_args);

// The `flagos::<route>` profiler event; free when no RecordFunction callback is registered.
// The check is the dispatcher's own per-operator one (a thread-local read): at::hasCallbacks()
// would copy the global callback list under a mutex on every call.
class RouteEvent {
 public:
  explicit RouteEvent(uint8_t route) {
    auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION);
    if (C10_UNLIKELY(callbacks.has_value())) {
      start(route, std::move(*callbacks));
    }
  }

 private:
  FLAGOS_API void start(uint8_t route, at::StepCallbacks&& callbacks);
  std::optional<at::RecordFunction> event_;
};

// Re-labels the fresh native results of one call as flagos tensors (as finish_call does).
using Relabel = ResultRelabeler;

inline bool is_flagos(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// Runs fn with flagos:index current, switching only when it is not (as call_native does).
template <class F>
decltype(auto) on_device(c10::DeviceIndex index, F&& fn) {
  DeviceScope scope(index);
  return fn();
}

// ---- argument mapping ----

template <class T>
inline constexpr bool needs_mapping_v = std::disjunction_v<
    std::is_same<std::decay_t<T>, at::Tensor>,
    std::is_same<std::decay_t<T>, std::optional<at::Tensor>>,
    std::is_same<std::decay_t<T>, at::TensorList>,
    std::is_same<std::decay_t<T>, at::ITensorListRef>,
    std::is_same<std::decay_t<T>, c10::List<std::optional<at::Tensor>>>,
    std::is_same<std::decay_t<T>, c10::List<at::Tensor>>,
    std::is_same<std::decay_t<T>, at::Generator>,
    std::is_same<std::decay_t<T>, std::optional<at::Generator>>,
    std::is_same<std::decay_t<T>, c10::Device>,
    std::is_same<std::decay_t<T>, std::optional<c10::Device>>>;

// Arguments without tensors, devices or generators pass through unchanged.
template <class T>
class Mapped {
  static_assert(
      !needs_mapping_v<T>,
      "this argument type has no fast mapping: leave the operator to the boxed router");

 public:
  explicit Mapped(T v) : v_(static_cast<T&&>(v)) {}
  void see(DeviceCheck&, uint16_t, bool) {}
  void map(bool) {}
  T get() {
    return static_cast<T&&>(v_);
  }
  void sync() {}
  void share(SharedAliasStorage&) {}
  at::Tensor* original_of(const void*) {
    return nullptr;
  }

 private:
  T v_;
};

// A single tensor, read (const Tensor&) or written (Tensor&, or a const Tensor& the schema
// marks written, as resize_ has).
template <class Ref>
class MappedTensor {
 public:
  explicit MappedTensor(Ref t) : src_(t) {}
  MappedTensor(const MappedTensor&) = delete;
  MappedTensor& operator=(const MappedTensor&) = delete;
  ~MappedTensor() {
    release_alias(alias_);
  }
  void see(DeviceCheck& devices, uint16_t arg, bool written) {
    devices.see(src_, arg, false, written);
  }
  void map(bool written) {
    if (is_flagos(src_)) {
      alias_ = native_alias(src_, written);
      written_ = written;
    }
  }
  Ref get() {
    return alias_.defined() ? alias_ : src_;
  }
  void sync() {
    if (written_) {
      sync_from_alias(src_, alias_);
    }
  }
  void share(SharedAliasStorage& shared) {
    if (alias_.defined()) {
      shared.add_replaceable(src_, alias_, written_);
    }
  }
  // The caller's tensor when `result` is (our alias of) this argument.
  at::Tensor* original_of(const void* result) {
    return result == &alias_ || result == &src_ ? const_cast<at::Tensor*>(&src_) : nullptr;
  }

 private:
  Ref src_;
  at::Tensor alias_;
  bool written_ = false;
};

template <>
class Mapped<const at::Tensor&> : public MappedTensor<const at::Tensor&> {
  using MappedTensor::MappedTensor;
};
template <>
class Mapped<at::Tensor&> : public MappedTensor<at::Tensor&> {
  using MappedTensor::MappedTensor;
};

template <>
class Mapped<const std::optional<at::Tensor>&> {
 public:
  explicit Mapped(const std::optional<at::Tensor>& t) : src_(t) {}
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  ~Mapped() {
    if (alias_.has_value()) {
      release_alias(*alias_);
    }
  }
  void see(DeviceCheck& devices, uint16_t arg, bool written) {
    if (src_.has_value()) {
      devices.see(*src_, arg, false, written);
    }
  }
  void map(bool written) {
    if (src_.has_value() && is_flagos(*src_)) {
      alias_ = native_alias(*src_, written);
      written_ = written;
    }
  }
  const std::optional<at::Tensor>& get() {
    return alias_.has_value() ? alias_ : src_;
  }
  void sync() {
    if (written_) {
      sync_from_alias(*src_, *alias_);
    }
  }
  void share(SharedAliasStorage& shared) {
    if (alias_.has_value()) {
      shared.add_replaceable(*src_, *alias_, written_);
    }
  }
  at::Tensor* original_of(const void*) {
    return nullptr;
  }

 private:
  const std::optional<at::Tensor>& src_;
  std::optional<at::Tensor> alias_;
  bool written_ = false;
};

// Tensor[] (the _foreach_ operators write through it).
template <>
class Mapped<at::TensorList> {
 public:
  explicit Mapped(at::TensorList list) : src_(list) {}
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  ~Mapped() {
    release_aliases();
  }
  void see(DeviceCheck& devices, uint16_t arg, bool written) {
    for (const at::Tensor& t : src_) {
      devices.see(t, arg, false, written);
    }
  }
  void map(bool written) {
    mapped_.reserve(src_.size());
    for (const at::Tensor& t : src_) {
      mapped_.push_back(is_flagos(t) ? native_alias(t, written) : t);
    }
    is_mapped_ = true;
    written_ = written;
  }
  at::TensorList get() {
    return is_mapped_ ? at::TensorList(mapped_) : src_;
  }
  void sync() {
    if (!written_) {
      return;
    }
    for (size_t i = 0; i < src_.size(); ++i) {
      if (is_flagos(src_[i])) {
        sync_from_alias(src_[i], mapped_[i]);
      }
    }
  }
  void share(SharedAliasStorage& shared) {
    for (size_t i = 0; is_mapped_ && i < src_.size(); ++i) {
      if (is_flagos(src_[i])) {
        shared.add(src_[i], mapped_[i], written_);
      }
    }
  }
  at::Tensor* original_of(const void*) {
    return nullptr;
  }

 private:
  void release_aliases() {
    for (size_t i = 0; i < mapped_.size(); ++i) {
      if (is_flagos(src_[i])) {
        release_alias(mapped_[i]);
      }
    }
  }

  at::TensorList src_;
  c10::SmallVector<at::Tensor, 4> mapped_;
  bool is_mapped_ = false;
  bool written_ = false;
};

// Tensor[] as cat takes it.
template <>
class Mapped<const at::ITensorListRef&> {
 public:
  explicit Mapped(const at::ITensorListRef& list) : src_(list) {}
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  ~Mapped() {
    release_aliases();
  }
  void see(DeviceCheck& devices, uint16_t arg, bool written) {
    for (const at::Tensor& t : src_) {
      devices.see(t, arg, false, written);
    }
  }
  void map(bool written) {
    TORCH_INTERNAL_ASSERT(!written, "fast kernels do not write through an ITensorListRef");
    mapped_.reserve(src_.size());
    for (const at::Tensor& t : src_) {
      mapped_.push_back(is_flagos(t) ? native_alias(t) : t);
    }
    ref_.emplace(at::ArrayRef<at::Tensor>(mapped_));
  }
  const at::ITensorListRef& get() {
    return ref_.has_value() ? *ref_ : src_;
  }
  void sync() {}
  void share(SharedAliasStorage& shared) {
    size_t i = 0;
    for (const at::Tensor& t : src_) {
      if (ref_.has_value() && is_flagos(t)) {
        shared.add_replaceable(t, mapped_[i], false); // mapped_ does not grow any more
      }
      ++i;
    }
  }
  at::Tensor* original_of(const void*) {
    return nullptr;
  }

 private:
  void release_aliases() {
    if (!ref_.has_value()) {
      return;
    }
    size_t i = 0;
    for (const at::Tensor& t : src_) {
      if (is_flagos(t)) {
        release_alias(mapped_[i]);
      }
      ++i;
    }
  }

  const at::ITensorListRef& src_;
  c10::SmallVector<at::Tensor, 4> mapped_;
  std::optional<at::ITensorListRef> ref_;
};

// Tensor?[] (index): CPU index tensors may join flagos ones, as the boxed router allows.
template <>
class Mapped<const c10::List<std::optional<at::Tensor>>&> {
 public:
  explicit Mapped(const c10::List<std::optional<at::Tensor>>& list) : src_(list) {}
  void see(DeviceCheck& devices, uint16_t arg, bool /*written*/) {
    for (const std::optional<at::Tensor>& t : src_) {
      if (t.has_value()) {
        devices.see(*t, arg, true);
      }
    }
  }
  void map(bool written) {
    TORCH_INTERNAL_ASSERT(!written, "fast kernels do not write through a Tensor?[]");
    c10::List<std::optional<at::Tensor>> mapped;
    mapped.reserve(src_.size());
    for (const std::optional<at::Tensor>& t : src_) {
      if (t.has_value() && is_flagos(*t)) {
        mapped.push_back(native_alias(*t));
      } else {
        mapped.push_back(t);
      }
    }
    mapped_ = std::move(mapped);
  }
  const c10::List<std::optional<at::Tensor>>& get() {
    return mapped_.has_value() ? *mapped_ : src_;
  }
  void sync() {}
  void share(SharedAliasStorage& shared) {
    for (size_t i = 0; mapped_.has_value() && i < src_.size(); ++i) {
      const std::optional<at::Tensor> t = src_.get(i);
      if (t.has_value() && is_flagos(*t)) {
        shared.add(*t, *mapped_->get(i), false);
      }
    }
  }
  at::Tensor* original_of(const void*) {
    return nullptr;
  }

 private:
  const c10::List<std::optional<at::Tensor>>& src_;
  std::optional<c10::List<std::optional<at::Tensor>>> mapped_;
};

// ---- result mapping ----

// The caller's tensor that a Tensor& result refers to (in-place and out= results).
template <class Holders>
at::Tensor& original_of(Holders& holders, const at::Tensor& result) {
  at::Tensor* found = nullptr;
  std::apply(
      [&](auto&... h) { ((found = found != nullptr ? found : h.original_of(&result)), ...); },
      holders);
  TORCH_INTERNAL_ASSERT(
      found != nullptr, "flagos fast kernel: a kernel returned a reference to no argument");
  return *found;
}

// Non-tensor results pass through.
template <class R>
struct MapResult {
  template <class H>
  static R run(R&& r, Relabel&, H&) {
    return std::forward<R>(r);
  }
};

template <>
struct MapResult<at::Tensor> {
  template <class H>
  static at::Tensor run(at::Tensor&& r, Relabel& relabel, H&) {
    return relabel(std::move(r));
  }
};

template <>
struct MapResult<at::Tensor&> {
  template <class H>
  static at::Tensor& run(at::Tensor& r, Relabel&, H& holders) {
    return original_of(holders, r);
  }
};

template <>
struct MapResult<const at::Tensor&> {
  template <class H>
  static const at::Tensor& run(const at::Tensor& r, Relabel&, H& holders) {
    return original_of(holders, r);
  }
};

template <>
struct MapResult<std::vector<at::Tensor>> {
  template <class H>
  static std::vector<at::Tensor> run(std::vector<at::Tensor>&& r, Relabel& relabel, H&) {
    for (auto& t : r) {
      t = relabel(std::move(t));
    }
    return std::move(r);
  }
};

template <class... Ts>
struct MapResult<std::tuple<Ts...>> {
  template <class H>
  static std::tuple<Ts...> run(std::tuple<Ts...>&& r, Relabel& relabel, H& holders) {
    return std::apply(
        [&](auto&&... e) {
          // Braces: results are re-labelled in order, as finish_call does.
          return std::tuple<Ts...>{
              MapResult<Ts>::run(std::forward<decltype(e)>(e), relabel, holders)...};
        },
        std::move(r));
  }
};

// ---- the kernel ----

// Direct: on device accelerators the native kernel gets the caller's flagos tensors instead of
// aliases. Only for kernels that read nothing but data pointers, metadata and the current
// stream, and make their outputs and fallbacks through the dispatcher (the native _foreach_
// kernels: aliasing their long tensor lists cost more than the kernels' own host time).
template <class Op, bool Direct = false, class Sig = typename Op::schema>
struct FastKernel;

// ---- size rules (the router's measure of a call, on unboxed arguments) ----

inline void see_size(routing::CallSize& size, const at::Tensor& t) {
  size.see(t);
}
inline void see_size(routing::CallSize& size, const std::optional<at::Tensor>& t) {
  if (t.has_value()) {
    size.see(*t);
  }
}
inline void see_size(routing::CallSize& size, at::TensorList list) {
  for (const auto& t : list) {
    size.see(t);
  }
}
inline void see_size(routing::CallSize& size, const at::ITensorListRef& list) {
  for (const auto& t : list) {
    size.see(t);
  }
}
inline void see_size(routing::CallSize& size, const c10::List<at::Tensor>& list) {
  for (size_t i = 0; i < list.size(); ++i) {
    size.see(list.get(i));
  }
}
inline void see_size(routing::CallSize& size, const c10::List<std::optional<at::Tensor>>& list) {
  for (const std::optional<at::Tensor> t : list) {
    see_size(size, t);
  }
}
template <class T>
void see_size(routing::CallSize&, const T&) {} // no tensor in it

// The route of one call of an operator with size rules, measured on its unboxed arguments.
template <class... A>
C10_NOINLINE uint8_t route_of_sized_call(const routing::OpEntry& e, const A&... args) {
  return routing::route_by_size(e, [&](const routing::SizeRules&) {
    routing::CallSize size;
    (see_size(size, args), ...);
    return size;
  });
}

template <class Op, bool Direct, class R, class... Args>
struct FastKernel<Op, Direct, R(Args...)> {
  // Arguments that may carry tensors; a call that writes one and has another gives aliases over
  // one flagos storage one alias storage (SharedAliasStorage), for the kernels' overlap checks.
  static constexpr size_t kTensorArgs = (size_t{needs_mapping_v<Args>} + ... + 0);

  static R run(c10::DispatchKeySet keys, Args... args) {
    static const OpInfo info = make_info(Op::name, Op::overload_name, sizeof...(Args));
    routing::OpEntry& e = *info.entry;
    uint8_t route = e.route.load(std::memory_order_acquire);
    if (C10_UNLIKELY(route == routing::kRouteBySize)) {
      route = route_of_sized_call(e, args...);
    }
    if (C10_UNLIKELY(route != routing::fast_route() || !info.usable)) {
      return c10::impl::BoxedKernelWrapper<R(Args...)>::call(
          routing::boxed_router(), e.op, keys, std::forward<Args>(args)...);
    }
    e.calls[route].fetch_add(1, std::memory_order_relaxed);
    RouteEvent event(route);
    return call(e, info, std::index_sequence_for<Args...>{}, std::forward<Args>(args)...);
  }

 private:
  template <size_t... I>
  static R call(routing::OpEntry& e, const OpInfo& info, std::index_sequence<I...>, Args... args) {
    std::tuple<Mapped<Args>...> m(std::forward<Args>(args)...);
    DeviceCheck devices(e.op);
    (std::get<I>(m).see(devices, static_cast<uint16_t>(I), ((info.written >> I) & 1) != 0), ...);
    const c10::DeviceIndex index = devices.finish();
    if (!(Direct && target().direct)) {
      (std::get<I>(m).map(((info.written >> I) & 1) != 0), ...);
      if constexpr (kTensorArgs >= 2) {
        if (info.written != 0) {
          SharedAliasStorage shared;
          (std::get<I>(m).share(shared), ...);
          shared.apply();
        }
      }
    }
    const auto keyset = target().keyset;
    auto kernel = [&]() -> R { return Op::redispatch(keyset, std::get<I>(m).get()...); };
    if constexpr (std::is_void_v<R>) {
      on_device(index, kernel);
      (std::get<I>(m).sync(), ...);
    } else {
      R result = on_device(index, kernel);
      (std::get<I>(m).sync(), ...);
      Relabel relabel(index, target().native_type);
      return MapResult<R>::run(std::forward<R>(result), relabel, m);
    }
  }
};

// ---- the table ----

template <class Op, bool Direct = false>
torch::CppFunction make_kernel() {
  using Kernel = FastKernel<Op, Direct>;
  return torch::CppFunction(TORCH_FN(Kernel::run));
}

} // namespace torch_fl::fast

// One entry of a kernels_*.cpp table: FLAGOS_FAST(add_Tensor) for at::_ops::add_Tensor;
// FLAGOS_FAST_DIRECT for a direct kernel (see FastKernel).
#define FLAGOS_FAST_KERNEL(op, direct)                       \
  ::torch_fl::fast::Kernel {                                 \
    at::_ops::op::name, at::_ops::op::overload_name,         \
        &::torch_fl::fast::make_kernel<at::_ops::op, direct> \
  }
#define FLAGOS_FAST(op) FLAGOS_FAST_KERNEL(op, false)
#define FLAGOS_FAST_DIRECT(op) FLAGOS_FAST_KERNEL(op, true)
