#pragma once

#include "macros.h"

// The per-operator router: the PrivateUse1 boxed fallback asks it which implementation runs an
// operator, and it runs it.
//
// A route is resolved once per operator, in this order: a run-time override from Python
// (torch_fl.routing.set_route), an environment override (FLAGOS_OP_<name>), the routing table
// (torch_fl/configs/backends_<accelerator>.conf or FLAGOS_BACKEND_CONFIG), the accelerator's
// default route. The result lives in the operator's OpEntry; a thread-local cache maps the
// dispatcher's operator to its entry, so a call costs one small hash probe, one relaxed atomic
// load of the route and one relaxed counter increment: no string, no allocation, no lock.

#include "aten/aliased_call.h"
#include "aten/routing/conf_parser.h"
#include "aten/routing/size_rules.h"

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_fl::routing {

enum class Route : uint8_t { CpuFallback = 0, Cuda = 1, FlagosPython = 2, FlaggemsCpp = 3 };
constexpr size_t kNumRoutes = 4;

FLAGOS_API const char* route_name(Route route);
FLAGOS_API std::optional<Route> route_from_name(const std::string& name);
FLAGOS_API std::vector<std::string> route_names();
// Empty when this build can run the route; else why not (naming the build switch or
// accelerator that provides it).
FLAGOS_API std::string unavailable_reason(Route route);
FLAGOS_API Route default_route();

// The route a routing-table line runs in a build. The dcu specification's default build (no
// boxing kernels) "leaves the rest of the conf on cpu_fallback": its table's `cuda` lines run on
// cpu_fallback there. Any other line runs its own route (an unavailable one is an error at load).
FLAGOS_API Route table_line_route(Route route, const std::string& accelerator, bool boxing);

// OpEntry::route while size rules choose each call's route (never a fast route, so fast kernels
// hand such calls to route_call).
constexpr uint8_t kRouteBySize = 0xFE;

// Where an operator's route came from.
enum class Origin : uint8_t { Default = 0, Table = 1, Env = 2, Api = 3 };

struct FLAGOS_API OpEntry {
  OpEntry(const c10::OperatorHandle& handle, std::string canonical_name);

  c10::OperatorHandle op; // read and written under the router's lock only
  // Under the router's lock only: the schema `plan_` was built from, and the dispatcher's
  // deregistration count when `op` was last checked (an operator defined again may get the
  // address of the one it replaces, so the lookup's key alone cannot tell them apart).
  std::unique_ptr<const c10::FunctionSchema> schema;
  uint64_t bound_epoch = 0;
  const std::string name; // "aten::add.Tensor"
  // What the schema says about the arguments. An operator dropped and defined again under the
  // same name (a custom operator redefined) may have another schema: the entry then gets a new
  // plan; the old one is kept (leaked), as a call still running may read it.
  const ArgPlan& plan() const {
    return *plan_.load(std::memory_order_acquire);
  }
  std::atomic<const ArgPlan*> plan_;
  // Whether the dispatcher has a CPU / native-device kernel for it. Kernels registered after
  // the first call (no registration listener hears of them) are found when a call needs one
  // the entry lacks (router.cpp, refresh_kernels).
  std::atomic<bool> has_cpu_kernel;
  std::atomic<bool> has_native_kernel;
  // Bumped when the operator is defined again (under the router's lock); what was derived
  // from the old schema outside the router (the Python route's keyword names) is remade.
  std::atomic<uint32_t> generation{0};
  // The route calls take: a Route, or kRouteBySize while `size_rules` choose it per call.
  std::atomic<uint8_t> route{0};
  // The route without size rules (the one a call that meets no rule takes).
  std::atomic<uint8_t> plain_route{0};
  std::atomic<uint8_t> origin{0};
  // The table's size rules for this operator while they are in force (no override), else null.
  std::atomic<const SizeRules*> size_rules{nullptr};
  std::array<std::atomic<uint64_t>, kNumRoutes> calls{};
  std::array<std::atomic<bool>, kNumRoutes> logged{};
  std::atomic<bool> fallback_warned{false};
  // A PyObject* (strong reference) for the flagos_python route, owned by the Python bindings.
  std::atomic<void*> python_kernel{nullptr};
  // The route's keyword names for its vectorcall (a tuple of interned strings, or null when
  // the schema has no keyword-only argument), made by the bindings on first use under the GIL.
  void* python_kwnames = nullptr;
  bool python_kwnames_made = false;
  uint32_t python_kwnames_generation = 0; // the generation they were made for
};

// The route of one call of an operator whose OpEntry::route is kRouteBySize: its size rules'
// choice for the call `measure(rules)` describes, or the plain route when a reload has just
// dropped the rules. route_call, the fast kernels and route_for all choose through here.
template <class Measure>
uint8_t route_by_size(const OpEntry& e, Measure&& measure) {
  const uint8_t plain = e.plain_route.load(std::memory_order_relaxed);
  const SizeRules* rules = e.size_rules.load(std::memory_order_acquire);
  return rules == nullptr ? plain : rules->choose(measure(*rules), plain);
}

// The flagos_python route, installed by the Python bindings (the core does not link Python).
// `op` is the call's own handle: OpEntry::op is rewritten (under the router's lock) when the
// operator is registered again, so calls never read it.
using PythonRoute =
    void (*)(const c10::OperatorHandle& op, OpEntry& entry, torch::jit::Stack* stack);
FLAGOS_API void set_python_route(PythonRoute route);

// The hot path: runs `op` through its route.
FLAGOS_API void route_call(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// route_call as a boxed kernel, for flagos kernels of their own that hand calls to the router.
inline const c10::BoxedKernel& boxed_router() {
  static const c10::BoxedKernel kernel = c10::BoxedKernel::makeFromFunction<&route_call>();
  return kernel;
}

// The entry of an operator (created on first use; entries live for the process).
FLAGOS_API OpEntry& entry_of(const c10::OperatorHandle& op);

// Profiler event name of a route ("flagos::<route>").
FLAGOS_API const char* route_event_name(Route route);

// ---- unboxed fast kernels (csrc/aten/fast/) ----
//
// Hot operators have unboxed PrivateUse1 kernels that run the accelerator's zero-copy route
// themselves (cpu_fallback on the cpu accelerator, cuda on a device accelerator) and hand every
// other route to route_call. fast_route() is the route they serve right now, or kNoFastRoute
// while something needs every call to take the boxed path (dispatch logging, the copy-fallback
// test hook): one relaxed load, compared with the operator's route on every call.
constexpr uint8_t kNoFastRoute = 0xFF;
namespace detail {
FLAGOS_API extern std::atomic<uint8_t> g_fast_route;
} // namespace detail
inline uint8_t fast_route() {
  return detail::g_fast_route.load(std::memory_order_relaxed);
}
// The zero-copy route of this build, whatever the gates say (nullopt: none, e.g. a device
// accelerator built without FLAGOS_BUILD_BOXING).
FLAGOS_API std::optional<Route> alias_route();
// Operators served by a fast kernel in this process (empty with FLAGOS_FAST_PATH=0).
FLAGOS_API std::vector<std::string> fast_operators();

// ---- configuration (all throw c10::Error with a message naming file, line or variable) ----

// Parses a table, checking operator names against the installed torch and, when
// `check_available`, that this build can run every route. Does not change the router.
FLAGOS_API std::vector<conf::Entry> parse_table(const std::string& path, bool check_available);

// Loads the table in force, FLAGOS_OP_* overrides, FLAGOS_LOG and FLAGOS_STRICT. `origin`
// says how the path was chosen (for torch_fl.info).
FLAGOS_API void load(const std::string& path, const std::string& origin);
// Replaces only the table (environment overrides, API overrides, logging and strict mode
// stay); a table with an error changes nothing.
FLAGOS_API void load_table(const std::string& path, const std::string& origin);

// The entry of an operator named as in a table ("add.Tensor", "aten::relu"); throws if it
// does not exist in the installed torch.
FLAGOS_API OpEntry& entry_by_name(const std::string& name);

// The route a call of `op` with this numel and dtype would take now.
FLAGOS_API std::string route_for(
    const std::string& op, int64_t numel, const std::optional<std::string>& dtype);

// Sets (or with nullopt clears) the run-time override of one operator.
FLAGOS_API void set_override(const std::string& op, const std::optional<std::string>& route);
FLAGOS_API std::optional<std::string> get_override(const std::string& op);

struct RuleInfo {
  std::string condition; // as written, e.g. "numel >= 65536, dtype = float16"
  std::string route;
  std::string where; // file:line
};

struct RouteInfo {
  std::string route;           // the plain route (calls that meet no size rule)
  std::string origin;          // "default", "table <file>:<line>", "env FLAGOS_OP_x", "api"
  std::vector<RuleInfo> rules; // size rules in force, in table order
};
FLAGOS_API RouteInfo describe(const std::string& op);

struct TableInfo {
  std::string path;
  std::string origin;
  bool loaded = false;
  std::string default_route;
  std::map<std::string, std::string> table;           // op -> route, as the table says
  std::map<std::string, std::vector<RuleInfo>> rules; // op -> the table's size rules
  std::map<std::string, std::string> env_overrides;   // op -> "route (VAR)"
  std::map<std::string, std::string> api_overrides;   // op -> route
};
FLAGOS_API TableInfo table_info();

// op -> route -> calls, for every (op, route) that ran at least once.
FLAGOS_API std::map<std::string, std::map<std::string, uint64_t>> stats();
FLAGOS_API void reset_stats();

FLAGOS_API void set_strict(bool strict);
FLAGOS_API bool strict();

enum LogFlags : uint32_t { kLogDispatch = 1, kLogDispatchAll = 2, kLogFallback = 4 };
FLAGOS_API void set_log_flags(uint32_t flags);
FLAGOS_API uint32_t log_flags();

// Test hook: makes cpu_fallback use host copies (the variant a device accelerator runs) on the
// cpu accelerator too, so its code, FLAGOS_LOG=fallback and strict mode can be tested here.
FLAGOS_API void set_force_copy_fallback(bool force);
FLAGOS_API bool force_copy_fallback();

// Whether calls of `op` on flagos reach the router (false when a flagos kernel of its own or a
// composite kernel serves it, so a route named for it has no effect).
FLAGOS_API bool reaches_router(const std::string& op);
// A flagos kernel of its own that hands its calls (or some of them) to route_call says so at
// registration, before any call, so reaches_router answers true for it.
FLAGOS_API void note_kernel_reaches_router(const std::string& canonical_name);

// Operators registered to reach the router under their own name (aten operators with a CPU
// or native-device kernel and no flagos kernel of their own), and how many each route serves.
FLAGOS_API std::vector<std::string> routed_operators();
FLAGOS_API std::map<std::string, uint64_t> route_counts();

// Every entry created so far (for the Python side; entries live for the process).
FLAGOS_API std::vector<OpEntry*> entries();

} // namespace torch_fl::routing
