#include "aten/routing/router.h"

#include "aten/fast/registry.h"
#include "aten/nested/nested_kernels.h"
#include "aten/sparse/sparse_kernels.h"
#include "runtime/accelerator.h"
#include "runtime/fork_safe_mutex.h"
#include "runtime/graph_capture.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

extern char** environ;

namespace torch_fl::routing {
namespace {

constexpr const char* kRouteNames[kNumRoutes] = {
    "cpu_fallback", "cuda", "flagos_python", "flaggems_cpp"};
// Profiler event names: traces show each flagos operator's route nested under the operator.
constexpr const char* kEventNames[kNumRoutes] = {
    "flagos::cpu_fallback", "flagos::cuda", "flagos::flagos_python", "flagos::flaggems_cpp"};
constexpr const char* kOpEnvPrefix = "FLAGOS_OP_";

std::atomic<uint32_t> g_log{0};
std::atomic<bool> g_strict{false};
std::atomic<bool> g_force_copy{false};
std::atomic<PythonRoute> g_python_route{nullptr};
// Bumped when the dispatcher drops an operator, whose address may then be reused.
std::atomic<uint64_t> g_epoch{0};

std::string torch_version() {
  return std::to_string(FLAGOS_TORCH_MAJOR) + "." + std::to_string(FLAGOS_TORCH_MINOR);
}

std::string canonical_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

std::optional<c10::OperatorHandle> find_op(const std::string& canonical) {
  const auto colons = canonical.find("::");
  const auto dot = canonical.find('.', colons == std::string::npos ? 0 : colons + 2);
  c10::OperatorName name(
      dot == std::string::npos ? canonical : canonical.substr(0, dot),
      dot == std::string::npos ? "" : canonical.substr(dot + 1));
  return c10::Dispatcher::singleton().findSchema(name);
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    out += (out.empty() ? "" : ", ") + item;
  }
  return out;
}

// "overloads of aten::add: Scalar, Tensor, ..." for the operator `canonical` names an overload
// of (whether or not that overload exists); empty when torch has no operator of that name.
std::string overloads_of(const std::string& canonical) {
  const auto dot = canonical.find('.', canonical.find("::") + 2);
  const std::string base = canonical.substr(0, dot);
  std::vector<std::string> overloads;
  for (const auto& n : c10::Dispatcher::singleton().getAllOpNames()) {
    if (n.name == base) {
      overloads.push_back(n.overload_name.empty() ? "default" : n.overload_name);
    }
  }
  std::sort(overloads.begin(), overloads.end());
  return overloads.empty() ? "" : "overloads of " + base + ": " + join(overloads);
}

// Empty when `canonical` names an operator of the installed torch; else the valid choices.
std::string check_op(const std::string& canonical) {
  if (find_op(canonical)) {
    return "";
  }
  const auto overloads = overloads_of(canonical);
  if (overloads.empty()) {
    const auto dot = canonical.find('.', canonical.find("::") + 2);
    return "the installed torch " + torch_version() + " has no operator '" +
           canonical.substr(0, dot) +
           "' (names are written as in torch.ops.aten: <op>.<overload>, e.g. add.Tensor, relu)";
  }
  return "the installed torch " + torch_version() + " has no such overload; " + overloads;
}

bool is_device_accelerator() {
  static const bool device = accelerator().native_device_type() != c10::DeviceType::CPU;
  return device;
}

// ---- the registry of operator entries and configuration ----

RuleInfo rule_info(const SizeRule& rule) {
  return RuleInfo{rule.condition, route_name(static_cast<Route>(rule.route)), rule.where};
}

// What the table says of one operator: a plain route, size rules, or both.
struct TableRoute {
  std::optional<Route> route;
  std::string where;                      // file:line of the plain route
  std::shared_ptr<const SizeRules> rules; // null: none
};

struct Resolved {
  Route route;
  Origin origin;
  const SizeRules* rules; // in force only without an override
};

struct EnvRoute {
  Route route;
  std::string variable;
};

class Listener final : public c10::OpRegistrationListener {
 public:
  void onOperatorRegistered(const c10::OperatorHandle&) override {}
  void onOperatorDeregistered(const c10::OperatorHandle&) override {
    g_epoch.fetch_add(1, std::memory_order_release);
  }
};

struct State {
  ForkSafeMutex mu;
  bool loaded = false;
  std::string path;
  std::string origin;
  std::unordered_map<std::string, TableRoute> table;
  std::unordered_map<std::string, EnvRoute> env;
  std::unordered_map<std::string, Route> api;
  std::unordered_map<const void*, OpEntry*> by_key;
  std::unordered_map<std::string, OpEntry*> by_name;
  std::vector<OpEntry*> all;
  // Every size-rule set ever loaded: a call may still read one after a reload replaced it.
  std::vector<std::shared_ptr<const SizeRules>> kept_rules;
  std::optional<c10::RegistrationHandleRAII> listener;

  // Caller holds mu.
  Resolved resolve(const std::string& name) const {
    if (auto it = api.find(name); it != api.end()) {
      return {it->second, Origin::Api, nullptr};
    }
    if (auto it = env.find(name); it != env.end()) {
      return {it->second.route, Origin::Env, nullptr};
    }
    if (auto it = table.find(name); it != table.end()) {
      const auto& t = it->second;
      return {
          t.route.value_or(default_route()),
          t.route ? Origin::Table : Origin::Default,
          t.rules.get()};
    }
    return {default_route(), Origin::Default, nullptr};
  }

  // Caller holds mu. Calls on other threads read `route` first and `size_rules` only when it
  // says kRouteBySize, so the rules are published before that value and dropped after it.
  void resolve(OpEntry& e) {
    Resolved r = resolve(e.name);
    // A device accelerator's default route is its native kernels; an operator with none but a
    // CPU kernel (a custom operator registered for "CPU" only) runs on cpu_fallback instead,
    // host-staged, counted and logged as such, rather than failing for want of a kernel.
    if (r.origin == Origin::Default && r.route == Route::Cuda &&
        !e.has_native_kernel.load(std::memory_order_relaxed) &&
        e.has_cpu_kernel.load(std::memory_order_relaxed)) {
      r.route = Route::CpuFallback;
    }
    const auto plain = static_cast<uint8_t>(r.route);
    e.plain_route.store(plain, std::memory_order_relaxed);
    e.origin.store(static_cast<uint8_t>(r.origin), std::memory_order_relaxed);
    if (r.rules != nullptr) {
      e.size_rules.store(r.rules, std::memory_order_release);
      e.route.store(kRouteBySize, std::memory_order_release);
    } else {
      e.route.store(plain, std::memory_order_release);
      e.size_rules.store(nullptr, std::memory_order_release);
    }
  }

  // Caller holds mu. Whether the flags changed.
  static bool refresh_kernel_flags(OpEntry& e, const c10::OperatorHandle& op) {
    const bool cpu = op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU);
    const bool native = op.hasComputedKernelForDispatchKey(accelerator().native_dispatch_key());
    const bool changed = cpu != e.has_cpu_kernel.load(std::memory_order_relaxed) ||
                         native != e.has_native_kernel.load(std::memory_order_relaxed);
    e.has_cpu_kernel.store(cpu, std::memory_order_relaxed);
    e.has_native_kernel.store(native, std::memory_order_relaxed);
    return changed;
  }

  // Caller holds mu. `op` has the entry's name but may be the operator defined again after
  // being dropped: a new handle, maybe another schema and other kernels. Routes set for the
  // name (and a Python kernel) stay.
  void rebind(OpEntry& e, const c10::OperatorHandle& op, uint64_t epoch) {
    e.op = op;
    if (!(op.schema() == *e.schema)) {
      e.schema = std::make_unique<const c10::FunctionSchema>(op.schema());
      e.plan_.store(new ArgPlan(ArgPlan::build(op)), std::memory_order_release);
      e.generation.fetch_add(1, std::memory_order_release);
    }
    refresh_kernel_flags(e, op);
    resolve(e);
    e.bound_epoch = epoch;
  }

  // Takes mu. Whether the flags changed (the route was then resolved again).
  bool refresh_and_resolve(const c10::OperatorHandle& op, OpEntry& e) {
    std::lock_guard lock(mu);
    if (!refresh_kernel_flags(e, op)) {
      return false;
    }
    resolve(e);
    return true;
  }

  // Caller holds mu.
  OpEntry& entry(const c10::OperatorHandle& op) {
    if (!listener) {
      listener.emplace(
          c10::Dispatcher::singleton().addRegistrationListener(std::make_unique<Listener>()));
    }
    const void* key = &op.operator_name();
    auto name = canonical_name(op.operator_name());
    const uint64_t epoch = g_epoch.load(std::memory_order_acquire);
    if (auto it = by_key.find(key); it != by_key.end() && it->second->name == name) {
      if (C10_UNLIKELY(it->second->bound_epoch != epoch)) {
        rebind(*it->second, op, epoch);
      }
      return *it->second;
    }
    if (auto it = by_name.find(name); it != by_name.end()) {
      rebind(*it->second, op, epoch);
      by_key[key] = it->second;
      return *it->second;
    }
    auto* e = new OpEntry(op, name); // entries live for the process: caches point at them
    e->bound_epoch = epoch;
    resolve(*e);
    by_key[key] = e;
    by_name.emplace(std::move(name), e);
    all.push_back(e);
    return *e;
  }
};

State& state() {
  static auto* s = new State(); // never destroyed: kernels may run during exit
  return *s;
}

// Thread-local map from the dispatcher's operator to its entry: open addressing on the
// OperatorName's address, which is stable for as long as the operator is registered.
//
// Plain data (trivially destructible, as the alias pool): its storage outlives the thread's
// other thread-locals, so a routed call made from one of their destructors finds it valid. A
// second thread-local, touched when the table is first allocated, frees the table at thread
// exit and leaves the cache empty (a later call there refills it, and that table is leaked).
class Cache {
 public:
  OpEntry* find(const void* key) {
    if (C10_UNLIKELY(epoch_ != g_epoch.load(std::memory_order_acquire))) {
      clear();
      return nullptr;
    }
    if (slots_ == nullptr) {
      return nullptr;
    }
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) {
        return slots_[i].entry;
      }
      if (slots_[i].key == nullptr) {
        return nullptr;
      }
    }
  }

  void insert(const void* key, OpEntry* entry) {
    if (slots_ == nullptr || (used_ + 1) * 2 > mask_ + 1) {
      grow();
    }
    place(key, entry);
    ++used_;
  }

  void clear() {
    delete[] slots_;
    slots_ = nullptr;
    used_ = 0;
    mask_ = 0;
    epoch_ = g_epoch.load(std::memory_order_acquire);
  }

 private:
  struct Slot {
    const void* key = nullptr;
    OpEntry* entry = nullptr;
  };

  static size_t hash(const void* key) {
    auto v = reinterpret_cast<uintptr_t>(key);
    v ^= v >> 17;
    return static_cast<size_t>(v * 0x9E3779B97F4A7C15ull >> 20);
  }

  void place(const void* key, OpEntry* entry) {
    size_t i = hash(key) & mask_;
    while (slots_[i].key != nullptr && slots_[i].key != key) {
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{key, entry};
  }

  void grow();

  Slot* slots_;
  size_t mask_;
  size_t used_;
  uint64_t epoch_;
  bool cleanup_registered_;
};
static_assert(std::is_trivially_destructible_v<Cache>);

thread_local Cache t_cache{};

struct CacheCleanup {
  ~CacheCleanup() {
    t_cache.clear();
  }
};

void Cache::grow() {
  if (C10_UNLIKELY(!cleanup_registered_)) {
    static thread_local CacheCleanup cleanup; // registers its destructor for this thread
    (void)cleanup;
    cleanup_registered_ = true;
  }
  const size_t old_size = slots_ == nullptr ? 0 : mask_ + 1;
  Slot* old = slots_;
  const size_t size = old_size == 0 ? 256 : old_size * 2;
  slots_ = new Slot[size];
  mask_ = size - 1;
  for (size_t i = 0; i < old_size; ++i) {
    if (old[i].key != nullptr) {
      place(old[i].key, old[i].entry);
    }
  }
  delete[] old;
}

// Recomputes the route the fast kernels serve from the gates that force the boxed path.
// Called after every change of a gate, with the state's lock held: the last caller reads the
// last values.
void update_fast_route() {
  const auto route = alias_route();
  const bool blocked = g_log.load(std::memory_order_relaxed) != 0 ||
                       g_force_copy.load(std::memory_order_relaxed) || !route.has_value();
  detail::g_fast_route.store(
      blocked ? kNoFastRoute : static_cast<uint8_t>(*route), std::memory_order_relaxed);
}

OpEntry& lookup(const c10::OperatorHandle& op) {
  const void* key = &op.operator_name();
  if (OpEntry* e = t_cache.find(key); C10_LIKELY(e != nullptr)) {
    return *e;
  }
  auto& s = state();
  std::lock_guard lock(s.mu);
  OpEntry& e = s.entry(op);
  t_cache.insert(key, &e);
  return e;
}

// ---- observability ----

std::string env_name_for(const std::string& canonical) {
  std::string name = canonical.rfind("aten::", 0) == 0 ? canonical.substr(6) : canonical;
  std::string out;
  for (char c : name) {
    if (c == '.') {
      out += "__";
    } else {
      out += c;
    }
  }
  return kOpEnvPrefix + out;
}

void log_call(OpEntry& e, Route r) {
  const uint32_t flags = g_log.load(std::memory_order_relaxed);
  const size_t i = static_cast<size_t>(r);
  if ((flags & kLogDispatchAll) != 0 ||
      ((flags & kLogDispatch) != 0 && !e.logged[i].exchange(true, std::memory_order_relaxed))) {
    std::fprintf(stderr, "[flagos dispatch] %s -> %s\n", e.name.c_str(), kRouteNames[i]);
  }
}

// cpu_fallback with host copies: what a device accelerator runs, and where strict mode and
// FLAGOS_LOG=fallback apply.
void check_copy_fallback(OpEntry& e) {
  // Host copies synchronise with the device, which a stream capture forbids: say which operator
  // broke the capture rather than let the native runtime invalidate it.
  TORCH_CHECK(
      !current_stream_is_capturing(),
      e.name,
      " runs on cpu_fallback (its arguments copied to host memory and back), which a graph "
      "cannot capture. Route it to a device implementation (",
      env_name_for(e.name),
      "=<route>, or torch_fl.routing.set_route) or call it outside the capture.");
  if (g_strict.load(std::memory_order_relaxed)) {
    TORCH_CHECK(
        false,
        "torch_fl strict mode: ",
        e.name,
        " would run on cpu_fallback (its arguments copied to host memory and back) on the ",
        accelerator().name(),
        " accelerator. Route it to a device implementation (",
        env_name_for(e.name),
        "=<route>, or torch_fl.routing.set_route), or leave strict "
        "mode (FLAGOS_STRICT=0, torch_fl.routing.strict(False)).");
  }
  if ((g_log.load(std::memory_order_relaxed) & kLogFallback) != 0 &&
      !e.fallback_warned.exchange(true, std::memory_order_relaxed)) {
    std::fprintf(
        stderr,
        "[flagos fallback] warning: %s runs on cpu_fallback (host copies) on the %s accelerator\n",
        e.name.c_str(),
        accelerator().name());
  }
}

void run_cpu_fallback(const c10::OperatorHandle& op, OpEntry& e, torch::jit::Stack* stack) {
  // On the cpu accelerator flagos memory is host memory: CPU kernels run on it zero-copy.
  const bool zero_copy =
      C10_LIKELY(!is_device_accelerator() && !g_force_copy.load(std::memory_order_relaxed));
  if (!zero_copy) {
    check_copy_fallback(e);
  }
  call_native(
      op,
      e.plan(),
      stack,
      c10::DispatchKey::CPU,
      zero_copy ? Mapping::Alias : Mapping::Copy,
      e.has_cpu_kernel.load(std::memory_order_relaxed));
}

// ---- configuration helpers ----

Route checked_route(const std::string& value, const std::string& what) {
  auto route = route_from_name(value);
  TORCH_CHECK(
      route.has_value(),
      what,
      ": unknown route '",
      value,
      "'; valid routes: ",
      join(route_names()));
  const auto why = unavailable_reason(*route);
  TORCH_CHECK(why.empty(), what, ": ", why);
  return *route;
}

std::string resolve_name(const std::string& text, const std::string& what) {
  auto canonical = conf::canonical_op_name(text);
  TORCH_CHECK(
      canonical.has_value(),
      what,
      ": '",
      text,
      "' is not an operator name; write it as in torch.ops.aten, e.g. 'aten::add.Tensor' or "
      "'relu'");
  const auto why = check_op(*canonical);
  TORCH_CHECK(why.empty(), what, ": unknown operator '", *canonical, "': ", why);
  return *canonical;
}

// FLAGOS_OP_<name>: `.` is written `__`, so every `__` could be the dot; the split that names
// an existing operator wins.
std::string op_from_env_name(const std::string& variable, const std::string& encoded) {
  std::vector<std::string> candidates;
  if (auto whole = conf::canonical_op_name(encoded)) {
    candidates.push_back(*whole);
  }
  for (size_t i = encoded.find("__"); i != std::string::npos; i = encoded.find("__", i + 1)) {
    if (auto name = conf::canonical_op_name(encoded.substr(0, i) + "." + encoded.substr(i + 2))) {
      candidates.push_back(*name);
    }
  }
  std::vector<std::string> found;
  for (const auto& canonical : candidates) {
    if (find_op(canonical) && std::find(found.begin(), found.end(), canonical) == found.end()) {
      found.push_back(canonical);
    }
  }
  if (found.empty()) {
    // An operator named without its overload, or with a wrong one: list its overloads, as a
    // table line's error does.
    std::string overloads;
    for (const auto& canonical : candidates) {
      if (overloads = overloads_of(canonical); !overloads.empty()) {
        overloads = "; " + overloads;
        break;
      }
    }
    TORCH_CHECK(
        false,
        variable,
        ": '",
        encoded,
        "' names no operator of the installed torch ",
        torch_version(),
        " (write <op>__<overload>, e.g. FLAGOS_OP_add__Tensor, FLAGOS_OP_relu)",
        overloads);
  }
  TORCH_CHECK(
      found.size() == 1,
      variable,
      " is ambiguous: it could name ",
      join(found),
      "; use torch_fl.routing.set_route for one of them");
  return found.front();
}

bool parse_bool(const char* variable, const char* raw) {
  std::string v(raw);
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "1" || v == "on" || v == "true" || v == "yes") {
    return true;
  }
  if (v.empty() || v == "0" || v == "off" || v == "false" || v == "no") {
    return false;
  }
  TORCH_CHECK(
      false,
      variable,
      "='",
      conf::printable(raw),
      "' is not a boolean; use 1/0, on/off, true/false or yes/no");
}

uint32_t parse_log(const char* raw) {
  uint32_t flags = 0;
  std::string v(raw);
  size_t pos = 0;
  while (pos <= v.size()) {
    size_t comma = v.find(',', pos);
    if (comma == std::string::npos) {
      comma = v.size();
    }
    std::string item = v.substr(pos, comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item == "dispatch") {
      flags |= kLogDispatch;
    } else if (item == "dispatch_all") {
      flags |= kLogDispatchAll;
    } else if (item == "fallback") {
      flags |= kLogFallback;
    } else if (item == "all") {
      flags |= kLogDispatchAll | kLogFallback;
    } else if (!item.empty()) {
      TORCH_CHECK(
          false,
          "FLAGOS_LOG='",
          conf::printable(raw),
          "': unknown value '",
          conf::printable(item),
          "'; valid values (comma-separated): dispatch, dispatch_all, fallback, all");
    }
    pos = comma + 1;
  }
  return flags;
}

// Structured operators (add.Tensor, mul_.Tensor, ...) reach a backend without a kernel of its
// own through a composite kernel that allocates the result and calls the out= overload, so the
// router would only ever see add.out. Registering the router as the PrivateUse1 kernel of
// every aten operator that has a CPU or native-device kernel makes each operator reach the
// router under its own name (so its route is the one the table names) and skips the detour.
// Operators with a flagos kernel of their own keep it; composite ones keep decomposing.
std::unordered_set<std::string>& direct_kernels() {
  static auto* names = new std::unordered_set<std::string>();
  return *names;
}

// Operators registered with an unboxed fast kernel (which boxes into route_call whenever the
// operator's route is not the zero-copy one).
std::vector<std::string>& fast_kernels() {
  static auto* names = new std::vector<std::string>();
  return *names;
}

// Composite kernels routed like kernels of their own, so they run whole on the native
// device's aliases:
// - those that refuse any device but CPU and CUDA ("mode only supports CPU, CUDA and XPU device
//   type") or call a DispatchStub with kernels for those alone (conj_physical_, kaiser_window);
// - in-place ones whose out= kernel tells in-place from out= by the arguments' C++ addresses
//   (addr_ calls addr_out(self, self, ...), which refuses a self of the wrong shape only when
//   `&result == &self`): through the dispatcher to PrivateUse1 the two would arrive as separate
//   arguments, and the out= kernel would resize the caller's tensor instead.
const std::unordered_set<std::string>& composites_run_whole_natively() {
  static const std::unordered_set<std::string> names{
      "aten::mode.values",
      "aten::conj_physical_",
      "aten::addr_",
      "aten::kaiser_window",
      "aten::kaiser_window.periodic",
      "aten::kaiser_window.beta",
      "aten::kaiser_window.out",
      "aten::kaiser_window.periodic_out",
      "aten::kaiser_window.beta_out"};
  return names;
}

void register_direct_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    // FLAGOS_FAST_PATH=0 registers the boxed router for every operator (for comparison and
    // as an escape hatch should a fast kernel misbehave).
    const char* fast_env = std::getenv("FLAGOS_FAST_PATH");
    const bool use_fast = fast_env == nullptr || parse_bool("FLAGOS_FAST_PATH", fast_env);
    auto* lib = new torch::Library( // never destroyed: kernels stay registered for the process
        torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
    const auto native_key = accelerator().native_dispatch_key();
    auto& dispatcher = c10::Dispatcher::singleton();
    for (const auto& name : dispatcher.getAllOpNames()) {
      if (name.name.rfind("aten::", 0) != 0) {
        continue;
      }
      auto op = dispatcher.findSchema(name);
      if (!op || op->hasKernelForDispatchKey(c10::DispatchKey::PrivateUse1)) {
        continue;
      }
      const auto canonical = canonical_name(name);
      if (!(op->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
            op->hasKernelForDispatchKey(native_key) ||
            composites_run_whole_natively().count(canonical) != 0)) {
        continue;
      }
      const fast::Kernel* kernel = use_fast ? fast::find(canonical) : nullptr;
      if (kernel != nullptr) {
        lib->impl(canonical.substr(6).c_str(), kernel->make());
        fast_kernels().push_back(canonical);
      } else {
        lib->impl(
            canonical.substr(6).c_str(), torch::CppFunction::makeFromBoxedFunction<&route_call>());
      }
      direct_kernels().insert(canonical);
    }
  });
}

} // namespace

void note_kernel_reaches_router(const std::string& canonical_name) {
  direct_kernels().insert(canonical_name);
}

bool reaches_router(const std::string& op) {
  const auto canonical = resolve_name(op, "torch_fl.routing");
  if (direct_kernels().count(canonical) != 0) {
    return true;
  }
  auto handle = find_op(canonical);
  // Otherwise only through the catch-all fallback, when no other kernel serves PrivateUse1.
  for (auto key :
       {c10::DispatchKey::PrivateUse1,
        c10::DispatchKey::CompositeExplicitAutogradNonFunctional,
        c10::DispatchKey::CompositeExplicitAutograd,
        c10::DispatchKey::CompositeImplicitAutograd}) {
    if (handle->hasKernelForDispatchKey(key)) {
      return false;
    }
  }
  return true;
}

OpEntry::OpEntry(const c10::OperatorHandle& handle, std::string canonical_name)
    : op(handle),
      schema(std::make_unique<const c10::FunctionSchema>(handle.schema())),
      name(std::move(canonical_name)),
      plan_(new ArgPlan(ArgPlan::build(handle))),
      has_cpu_kernel(handle.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)),
      has_native_kernel(
          handle.hasComputedKernelForDispatchKey(accelerator().native_dispatch_key())) {}

const char* route_name(Route route) {
  return kRouteNames[static_cast<size_t>(route)];
}

std::optional<Route> route_from_name(const std::string& name) {
  for (size_t i = 0; i < kNumRoutes; ++i) {
    if (name == kRouteNames[i]) {
      return static_cast<Route>(i);
    }
  }
  return std::nullopt;
}

std::vector<std::string> route_names() {
  return {std::begin(kRouteNames), std::end(kRouteNames)};
}

std::string unavailable_reason(Route route) {
  const std::string accel = accelerator().name();
  switch (route) {
    case Route::CpuFallback:
    case Route::FlagosPython:
      return "";
    case Route::Cuda:
      if (accel == "cpu") {
        return "route 'cuda' (the vendor's kernels reached zero-copy) needs the cuda or dcu "
               "accelerator (FLAGOS_ACCELERATOR=cuda|dcu with FLAGOS_BUILD_BOXING=1); this "
               "build is FLAGOS_ACCELERATOR=cpu, whose native route is cpu_fallback";
      }
#ifdef FLAGOS_BUILD_BOXING
      return "";
#else
      return "route 'cuda' needs a build with FLAGOS_BUILD_BOXING=1; this FLAGOS_ACCELERATOR=" +
             accel +
             " build has no boxing route (rebuild with it, or use cpu_fallback or "
             "flagos_python)";
#endif
    case Route::FlaggemsCpp:
      return "route 'flaggems_cpp' needs a build with FLAGOS_BUILD_FLAGGEMS_CPP=1 (the FlagGems "
             "C++ path), which this build does not have; use flagos_python for FlagGems' "
             "Python (Triton) kernels";
  }
  return "unknown route";
}

Route table_line_route(Route route, const std::string& accelerator, bool boxing) {
  if (route == Route::Cuda && accelerator == "dcu" && !boxing) {
    return Route::CpuFallback;
  }
  return route;
}

namespace {

constexpr bool kBoxing =
#ifdef FLAGOS_BUILD_BOXING
    true;
#else
    false;
#endif

Route this_builds_table_route(Route route) {
  return table_line_route(route, accelerator().name(), kBoxing);
}

} // namespace

Route default_route() {
#ifdef FLAGOS_BUILD_BOXING
  if (is_device_accelerator()) {
    return Route::Cuda;
  }
#endif
  return Route::CpuFallback;
}

namespace detail {
std::atomic<uint8_t> g_fast_route{kNoFastRoute};
} // namespace detail

std::optional<Route> alias_route() {
  if (!is_device_accelerator()) {
    return Route::CpuFallback;
  }
#ifdef FLAGOS_BUILD_BOXING
  return Route::Cuda;
#else
  return std::nullopt;
#endif
}

std::vector<std::string> fast_operators() {
  auto out = fast_kernels();
  std::sort(out.begin(), out.end());
  return out;
}

const char* route_event_name(Route route) {
  return kEventNames[static_cast<size_t>(route)];
}

OpEntry& entry_of(const c10::OperatorHandle& op) {
  auto& s = state();
  std::lock_guard lock(s.mu);
  return s.entry(op);
}

void set_python_route(PythonRoute route) {
  g_python_route.store(route, std::memory_order_release);
}

// The route of one call of an operator with size rules, measured on the argument stack.
static C10_NOINLINE uint8_t route_of_sized_call(const OpEntry& e, const torch::jit::Stack& stack) {
  return route_by_size(e, [&](const SizeRules& rules) { return rules.measure(stack); });
}

// Whether the kernel a route runs is known to exist (true for routes that run none of torch's).
static bool has_route_kernel(const OpEntry& e, Route r) {
  switch (r) {
    case Route::CpuFallback:
      return e.has_cpu_kernel.load(std::memory_order_relaxed);
    case Route::Cuda:
      return e.has_native_kernel.load(std::memory_order_relaxed);
    default:
      return true;
  }
}

// A kernel registered after the operator's first flagos call (a custom operator called before
// `lib.impl`) is not announced to registration listeners: before a call is refused for want of
// one, the dispatcher is asked again, and the route resolved again when the answer changed.
static C10_NOINLINE bool refresh_kernels(const c10::OperatorHandle& op, OpEntry& e) {
  return state().refresh_and_resolve(op, e);
}

void route_call(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpEntry& e = lookup(op);
  uint8_t raw = e.route.load(std::memory_order_acquire);
  if (C10_UNLIKELY(raw == kRouteBySize)) {
    raw = route_of_sized_call(e, *stack);
  }
  const auto r = static_cast<Route>(raw);
  if (C10_UNLIKELY(!has_route_kernel(e, r)) && refresh_kernels(op, e)) {
    route_call(op, stack); // once: the flags now say what the dispatcher has
    return;
  }
  const auto i = static_cast<size_t>(r);
  e.calls[i].fetch_add(1, std::memory_order_relaxed);
  if (C10_UNLIKELY(g_log.load(std::memory_order_relaxed) != 0)) {
    log_call(e, r);
  }
  at::RecordFunction guard(at::RecordScope::FUNCTION);
  if (C10_UNLIKELY(guard.isActive())) {
    guard.before(kEventNames[i]);
  }
  switch (r) {
    case Route::CpuFallback:
      run_cpu_fallback(op, e, stack);
      return;
    case Route::Cuda:
      call_native(
          op,
          e.plan(),
          stack,
          accelerator().native_dispatch_key(),
          Mapping::Alias,
          e.has_native_kernel.load(std::memory_order_relaxed));
      return;
    case Route::FlagosPython: {
      auto python = g_python_route.load(std::memory_order_acquire);
      TORCH_CHECK(
          python != nullptr,
          e.name,
          " is routed to flagos_python, but torch_fl's Python bindings are not loaded");
      python(op, e, stack);
      return;
    }
    case Route::FlaggemsCpp:
      break;
  }
  TORCH_CHECK(false, e.name, ": ", unavailable_reason(r));
}

std::vector<conf::Entry> parse_table(const std::string& path, bool check_available) {
  conf::Options options;
  options.routes = route_names();
  options.dtypes = rule_dtype_names();
  options.read_file = &conf::read_disk_file;
  options.check_op = &check_op;
  std::vector<conf::Entry> entries;
  try {
    entries = conf::parse_file(path, options);
  } catch (const conf::ConfError& err) {
    TORCH_CHECK(false, "routing table error: ", err.what());
  }
  if (check_available) {
    for (const auto& e : entries) {
      const auto why = unavailable_reason(this_builds_table_route(*route_from_name(e.route)));
      TORCH_CHECK(
          why.empty(),
          "routing table error: ",
          e.file,
          ":",
          e.line,
          ": ",
          e.op,
          e.when ? " [" + e.when->text + "]" : std::string(),
          " = ",
          e.route,
          ": ",
          why);
    }
  }
  return entries;
}

namespace {

using Table = std::unordered_map<std::string, TableRoute>;

// Reads a table into what the router keeps: per operator the last plain line and the rules
// after it (a plain line states the whole route, so earlier rules go).
Table read_table(const std::string& path) {
  std::unordered_map<std::string, std::vector<SizeRule>> rules;
  Table out;
  for (const auto& e : parse_table(path, /*check_available=*/true)) {
    const Route route = this_builds_table_route(*route_from_name(e.route));
    if (e.when) {
      rules[e.op].push_back(make_size_rule(e, static_cast<uint8_t>(route)));
    } else {
      out[e.op].route = route;
      out[e.op].where = e.file + ":" + std::to_string(e.line);
      rules.erase(e.op);
    }
  }
  for (auto& [name, list] : rules) {
    const size_t num_args = find_op(name)->schema().arguments().size();
    out[name].rules = std::make_shared<const SizeRules>(num_args, std::move(list));
  }
  return out;
}

// Caller holds s.mu.
void install_table(State& s, Table&& table, const std::string& path, const std::string& origin) {
  for (const auto& [name, t] : table) {
    if (t.rules) { // calls on other threads may read a set after a reload replaced it
      s.kept_rules.push_back(t.rules);
    }
  }
  s.table = std::move(table);
  s.path = path;
  s.origin = origin;
  s.loaded = true;
}

} // namespace

void load(const std::string& path, const std::string& origin) {
  register_direct_kernels();
  register_sparse_kernels();
  register_nested_kernels();
  Table table = read_table(path);

  std::unordered_map<std::string, EnvRoute> env;
  uint32_t log = 0;
  bool strict_mode = false;
  if (const char* v = std::getenv("FLAGOS_LOG")) {
    log = parse_log(v);
  }
  if (const char* v = std::getenv("FLAGOS_STRICT")) {
    strict_mode = parse_bool("FLAGOS_STRICT", v);
  }
  const size_t prefix = std::strlen(kOpEnvPrefix);
  for (char** p = environ; p != nullptr && *p != nullptr; ++p) {
    if (std::strncmp(*p, kOpEnvPrefix, prefix) != 0) {
      continue;
    }
    // Valid names and routes are ASCII; anything else is shown escaped in the error.
    const std::string item = conf::printable(*p);
    const auto eq = item.find('=');
    const std::string variable = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    const std::string op = op_from_env_name(variable, variable.substr(prefix));
    env[op] = EnvRoute{checked_route(value, variable + "=" + value), variable};
  }

  auto& s = state();
  std::lock_guard lock(s.mu);
  install_table(s, std::move(table), path, origin);
  s.env = std::move(env);
  g_log.store(log, std::memory_order_relaxed);
  g_strict.store(strict_mode, std::memory_order_relaxed);
  update_fast_route();
  for (auto* e : s.all) {
    s.resolve(*e);
  }
}

void load_table(const std::string& path, const std::string& origin) {
  Table table = read_table(path); // errors leave the table in force untouched
  auto& s = state();
  std::lock_guard lock(s.mu);
  install_table(s, std::move(table), path, origin);
  for (auto* e : s.all) {
    s.resolve(*e);
  }
}

OpEntry& entry_by_name(const std::string& name) {
  const auto canonical = resolve_name(name, "torch_fl.routing");
  auto op = find_op(canonical);
  auto& s = state();
  std::lock_guard lock(s.mu);
  return s.entry(*op);
}

void set_override(const std::string& op, const std::optional<std::string>& route) {
  const auto canonical = resolve_name(op, "torch_fl.routing.set_route");
  std::optional<Route> r;
  if (route) {
    r = checked_route(*route, "torch_fl.routing.set_route(" + canonical + ")");
  }
  OpEntry& e = entry_by_name(canonical);
  auto& s = state();
  std::lock_guard lock(s.mu);
  if (r) {
    s.api[canonical] = *r;
  } else {
    s.api.erase(canonical);
  }
  s.resolve(e);
}

std::string route_for(
    const std::string& op, int64_t numel, const std::optional<std::string>& dtype) {
  TORCH_CHECK(numel >= 0, "torch_fl.routing.get_route: numel must be >= 0, not ", numel);
  CallSize size;
  size.numel = numel;
  if (dtype) {
    size.dtype = rule_dtype(*dtype);
    TORCH_CHECK(
        size.dtype.has_value(),
        "torch_fl.routing.get_route: unknown dtype '",
        *dtype,
        "'; valid dtypes: ",
        join(rule_dtype_names()));
  }
  OpEntry& e = entry_by_name(op);
  const uint8_t raw = e.route.load(std::memory_order_acquire);
  return route_name(
      static_cast<Route>(
          raw == kRouteBySize ? route_by_size(e, [&](const SizeRules&) { return size; }) : raw));
}

std::optional<std::string> get_override(const std::string& op) {
  const auto canonical = resolve_name(op, "torch_fl.routing");
  auto& s = state();
  std::lock_guard lock(s.mu);
  if (auto it = s.api.find(canonical); it != s.api.end()) {
    return route_name(it->second);
  }
  return std::nullopt;
}

RouteInfo describe(const std::string& op) {
  OpEntry& e = entry_by_name(op);
  auto& s = state();
  std::lock_guard lock(s.mu);
  RouteInfo info;
  info.route = route_name(static_cast<Route>(e.plain_route.load()));
  if (const SizeRules* rules = e.size_rules.load()) {
    for (const auto& r : rules->rules()) {
      info.rules.push_back(rule_info(r));
    }
  }
  switch (static_cast<Origin>(e.origin.load())) {
    case Origin::Default:
      info.origin = "default";
      break;
    case Origin::Table:
      info.origin = "table " + s.table.at(e.name).where;
      break;
    case Origin::Env:
      info.origin = "env " + s.env.at(e.name).variable;
      break;
    case Origin::Api:
      info.origin = "api";
      break;
  }
  return info;
}

TableInfo table_info() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  TableInfo info;
  info.path = s.path;
  info.origin = s.origin;
  info.loaded = s.loaded;
  info.default_route = route_name(default_route());
  for (const auto& [op, r] : s.table) {
    if (r.route) {
      info.table[op] = route_name(*r.route);
    }
    if (r.rules) {
      for (const auto& rule : r.rules->rules()) {
        info.rules[op].push_back(rule_info(rule));
      }
    }
  }
  for (const auto& [op, r] : s.env) {
    info.env_overrides[op] = std::string(route_name(r.route)) + " (" + r.variable + ")";
  }
  for (const auto& [op, r] : s.api) {
    info.api_overrides[op] = route_name(r);
  }
  return info;
}

std::map<std::string, std::map<std::string, uint64_t>> stats() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  std::map<std::string, std::map<std::string, uint64_t>> out;
  for (auto* e : s.all) {
    for (size_t i = 0; i < kNumRoutes; ++i) {
      if (auto n = e->calls[i].load(std::memory_order_relaxed); n != 0) {
        out[e->name][kRouteNames[i]] = n;
      }
    }
  }
  return out;
}

void reset_stats() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  for (auto* e : s.all) {
    for (auto& c : e->calls) {
      c.store(0, std::memory_order_relaxed);
    }
  }
}

void set_strict(bool value) {
  g_strict.store(value, std::memory_order_relaxed);
}

bool strict() {
  return g_strict.load(std::memory_order_relaxed);
}

void set_log_flags(uint32_t flags) {
  std::lock_guard lock(state().mu);
  g_log.store(flags, std::memory_order_relaxed);
  update_fast_route();
}

uint32_t log_flags() {
  return g_log.load(std::memory_order_relaxed);
}

void set_force_copy_fallback(bool force) {
  std::lock_guard lock(state().mu);
  g_force_copy.store(force, std::memory_order_relaxed);
  update_fast_route();
}

bool force_copy_fallback() {
  return g_force_copy.load(std::memory_order_relaxed);
}

std::vector<std::string> routed_operators() {
  std::vector<std::string> out(direct_kernels().begin(), direct_kernels().end());
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::string, uint64_t> route_counts() {
  const auto ops = routed_operators();
  auto& s = state();
  std::lock_guard lock(s.mu);
  std::map<std::string, uint64_t> out;
  for (const auto& op : ops) {
    out[route_name(s.resolve(op).route)] += 1;
  }
  return out;
}

std::vector<OpEntry*> entries() {
  auto& s = state();
  std::lock_guard lock(s.mu);
  return s.all;
}

} // namespace torch_fl::routing
