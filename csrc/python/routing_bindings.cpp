// Python bindings of the router (torch_fl.routing) and the flagos_python route: the C++ router
// calls a registered Python callable with the operator's arguments as zero-copy native
// tensors, holding the GIL only for the call.

#include "aten/alias.h"
#include "aten/aliased_call.h"
#include "aten/routing/router.h"
#include "aten/routing/size_rules.h"
#include "python/parked_aliases.h"
#include "runtime/accelerator.h"

#include <c10/util/SmallVector.h>

#include <mutex>

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/csrc/utils/pybind.h>

namespace py = pybind11;

namespace torch_fl {
namespace {

using routing::OpEntry;

// Re-raises the Python exception of a kernel as the same type with the operator named; the
// original becomes its __cause__. Falls back to the original when the type cannot be built
// from a message.
[[noreturn]] void rethrow_named(py::error_already_set& err, const std::string& op) {
  py::object type = err.type();
  py::object value = err.value();
  const std::string message = op + " (flagos_python route): " + py::str(value).cast<std::string>();
  py::str text(message);
  PyObject* fresh = PyObject_CallOneArg(type.ptr(), text.ptr());
  if (fresh == nullptr || PyObject_IsInstance(fresh, type.ptr()) != 1) {
    Py_XDECREF(fresh);
    PyErr_Clear();
    throw;
  }
  PyException_SetCause(fresh, value.release().ptr());
  PyErr_SetObject(type.ptr(), fresh);
  Py_DECREF(fresh);
  throw py::error_already_set();
}

// An argument as torch.library hands it to a Python kernel: the stack stores ScalarType, Layout
// and MemoryFormat as ints, which Python kernels expect as torch.dtype, torch.layout and
// torch.memory_format (`torch.sum(x, dtype=6)` is an error).
py::object argument_to_python(c10::IValue&& v, const c10::Argument& a) {
  if (v.isInt()) {
    const c10::Type* type = a.real_type().get();
    if (type->kind() == c10::TypeKind::OptionalType) {
      type = type->castRaw<c10::OptionalType>()->getElementType().get();
    }
    switch (type->kind()) {
      case c10::TypeKind::ScalarTypeType:
        return py::cast(static_cast<at::ScalarType>(v.toInt()));
      case c10::TypeKind::LayoutType:
        return py::cast(static_cast<c10::Layout>(v.toInt()));
      case c10::TypeKind::MemoryFormatType:
        return py::cast(static_cast<at::MemoryFormat>(v.toInt()));
      default:
        break;
    }
  }
  return torch::jit::toPyObject(std::move(v));
}

// A fresh tensor a Python kernel returned has a Python object. When nothing but the route holds
// that object (and the object is a plain torch.Tensor), the tensor is re-labelled as flagos in
// place, object and all: it becomes the flagos result the caller gets back, instead of a new
// flagos tensor (and a new Python object) being made and the kernel's freed.
// The references then (torch's PyObject preservation, 2.10 onward): the object holds the tensor
// and, while the tensor has a second C++ owner (`v`), the tensor holds the object; so two each
// way, the route's `result` being the object's other one.
void relabel_if_only_ours(c10::IValue& v, py::handle value, c10::DeviceIndex index) {
  if (v.isTensor() && Py_TYPE(value.ptr()) == reinterpret_cast<PyTypeObject*>(THPVariableClass) &&
      Py_REFCNT(value.ptr()) == 2 && !v.toTensor().requires_grad()) {
    relabel_fresh_in_place(v.toTensor(), index, /*owners=*/2);
  }
}

// The keyword-only argument names of an operator as the vectorcall's `kwnames` (borrowed;
// null when it has none), made once per operator: interned strings match the kernel's
// parameter names by identity.
PyObject* keyword_names(const c10::OperatorHandle& op, OpEntry& e) {
#ifdef Py_GIL_DISABLED
  static std::mutex mutex; // no GIL to order the first call's write before other reads
  std::lock_guard<std::mutex> lock(mutex);
#endif
  const uint32_t generation = e.generation.load(std::memory_order_acquire);
  if (!e.python_kwnames_made || e.python_kwnames_generation != generation) {
    // (A redefined operator's old names are leaked: a call may still hold them.)
    py::list names;
    for (const auto& a : op.schema().arguments()) {
      if (a.kwarg_only()) {
        names.append(
            py::reinterpret_steal<py::object>(PyUnicode_InternFromString(a.name().c_str())));
      }
    }
    e.python_kwnames = names.empty() ? nullptr : py::tuple(names).release().ptr();
    e.python_kwnames_made = true; // under the GIL (or the mutex), as every read
    e.python_kwnames_generation = generation;
  }
  return static_cast<PyObject*>(e.python_kwnames);
}

PyObject* require_python_kernel(const OpEntry& e) {
  auto* kernel = static_cast<PyObject*>(e.python_kernel.load(std::memory_order_acquire));
  TORCH_CHECK_NOT_IMPLEMENTED(
      kernel != nullptr,
      e.name,
      " is routed to flagos_python, but no Python kernel is registered for it; register one "
      "with torch_fl.routing.register_python_kernel('",
      e.name,
      "', fn) or route it elsewhere (torch_fl.routing.set_route, FLAGOS_OP_<name>)");
  return kernel;
}

void python_route(const c10::OperatorHandle& op, OpEntry& e, torch::jit::Stack* stack) {
  require_python_kernel(e); // before any work; asked again under the GIL, where it is kept
  const auto& schema = op.schema();
  PreparedCall call;
  call.defer_read_aliases = true; // mapped below, to objects kept between calls
  prepare_call(op, e.plan(), stack, Mapping::Alias, call);
  // Python kernels (Triton) launch on the current native device and stream; flagos:N is native
  // device N and flagos streams are the native ones, so make the call's device current. Only
  // switch when it differs: the guard costs a device query and two sets.
  DeviceScope scope(call.index);
  {
    py::gil_scoped_acquire gil;
    // Unregistering takes the GIL too, so the kernel read here stays alive for the call (not
    // so on a free-threaded Python, which this route does not yet guard).
    auto fn = py::reinterpret_borrow<py::object>(require_python_kernel(e));
    const auto& args = schema.arguments();
    const size_t begin = stack->size() - args.size();
    // One vectorcall: positional arguments, then the keyword-only ones named by `kwnames`
    // (no tuple and dict built only to be unpacked again).
    c10::SmallVector<py::object, 8> positional;
    c10::SmallVector<py::object, 4> keywords;
    // The read-only flagos arguments prepare_call left unmapped, as alias objects (a second
    // reference each, to park them once the kernel is done).
    c10::SmallVector<py::object, 4> aliases;
    for (size_t i = 0; i < args.size(); ++i) {
      auto& v = (*stack)[begin + i];
      py::object obj;
      if (v.isTensor() && v.toTensor().is_privateuseone()) {
        obj = python::alias_object(v.toTensor());
        aliases.push_back(obj);
      } else {
        obj = argument_to_python(std::move(v), args[i]);
      }
      if (args[i].kwarg_only()) {
        keywords.push_back(std::move(obj));
      } else {
        positional.push_back(std::move(obj));
      }
    }
    torch::jit::drop(*stack, args.size());
    c10::SmallVector<PyObject*, 12> argv;
    for (const auto& o : positional) {
      argv.push_back(o.ptr());
    }
    for (const auto& o : keywords) {
      argv.push_back(o.ptr());
    }

    py::object result;
    try {
      PyObject* r =
          PyObject_Vectorcall(fn.ptr(), argv.data(), positional.size(), keyword_names(op, e));
      if (r == nullptr) {
        throw py::error_already_set();
      }
      result = py::reinterpret_steal<py::object>(r);
    } catch (py::error_already_set& err) {
      rethrow_named(err, e.name);
    }

    const auto& returns = schema.returns();
    auto convert = [&](py::handle value, size_t r) -> c10::IValue {
      if (e.plan().returns_arg[r] >= 0) {
        return c10::IValue(); // the caller's own tensor replaces it in finish_call
      }
      try {
        c10::IValue v = torch::jit::toIValue(value, returns[r].type());
        relabel_if_only_ours(v, value, call.index);
        return v;
      } catch (const std::exception& ex) {
        TORCH_CHECK_TYPE(
            false,
            e.name,
            " (flagos_python route): the Python kernel returned ",
            py::str(py::type::of(value)).cast<std::string>(),
            " for result ",
            r,
            ", expected ",
            returns[r].type()->str(),
            ": ",
            ex.what());
      }
    };
    if (returns.size() == 1) {
      stack->push_back(convert(result, 0));
    } else if (returns.size() > 1) {
      TORCH_CHECK_TYPE(
          py::isinstance<py::tuple>(result) || py::isinstance<py::list>(result),
          e.name,
          " (flagos_python route): the Python kernel must return a tuple of ",
          returns.size(),
          " results, got ",
          py::str(py::type::of(result)).cast<std::string>());
      auto seq = py::reinterpret_borrow<py::sequence>(result);
      TORCH_CHECK_TYPE(
          seq.size() == returns.size(),
          e.name,
          " (flagos_python route): the Python kernel returned ",
          seq.size(),
          " results, expected ",
          returns.size());
      for (size_t r = 0; r < returns.size(); ++r) {
        stack->push_back(convert(seq[r], r));
      }
    }
    // Still under the GIL: the native results a Python kernel made, and the aliases it was
    // given, have Python objects, which their last C++ reference (dropped here once results are
    // re-labelled) releases. Without the GIL each such release would take it back.
    finish_call(op, e.plan(), stack, call);
    call.written.clear(); // the aliases of written arguments had Python objects too
    result = py::object();
    positional.clear();
    keywords.clear();
    for (auto& alias : aliases) {
      python::park_alias_object(std::move(alias));
    }
  }
}

void register_python_kernel(const std::string& op, py::object fn) {
  OpEntry& e = routing::entry_by_name(op);
  TORCH_CHECK_TYPE(
      fn.is_none() || PyCallable_Check(fn.ptr()),
      "register_python_kernel(",
      e.name,
      "): the kernel must be callable, got ",
      py::str(py::type::of(fn)).cast<std::string>());
  PyObject* fresh = fn.is_none() ? nullptr : fn.inc_ref().ptr();
  auto* old = static_cast<PyObject*>(e.python_kernel.exchange(fresh, std::memory_order_acq_rel));
  Py_XDECREF(old); // calls read the kernel under the GIL too, so none is using it now
}

py::object python_kernel(const std::string& op) {
  OpEntry& e = routing::entry_by_name(op);
  auto* k = static_cast<PyObject*>(e.python_kernel.load(std::memory_order_acquire));
  return k == nullptr ? py::none() : py::reinterpret_borrow<py::object>(k);
}

py::list python_kernel_ops() {
  py::list out;
  for (auto* e : routing::entries()) {
    if (e->python_kernel.load(std::memory_order_acquire) != nullptr) {
      out.append(e->name);
    }
  }
  return out;
}

// Size rules as [(condition, route, "file:line"), ...].
py::list rules_to_python(const std::vector<routing::RuleInfo>& rules) {
  py::list out;
  for (const auto& r : rules) {
    out.append(py::make_tuple(r.condition, r.route, r.where));
  }
  return out;
}

} // namespace

void init_routing_bindings(py::module_& m) {
  routing::set_python_route(&python_route);

  m.def("_routing_load", &routing::load, py::arg("path"), py::arg("origin"));
  m.def("_routing_load_table", &routing::load_table, py::arg("path"), py::arg("origin"));
  m.def(
      "_routing_parse_table",
      [](const std::string& path, bool check_available) {
        py::list out;
        for (const auto& e : routing::parse_table(path, check_available)) {
          out.append(
              py::make_tuple(e.op, e.route, e.file, e.line, e.when ? e.when->text : std::string()));
        }
        return out;
      },
      py::arg("path"),
      py::arg("check_available") = true);
  m.def("_routing_set_route", &routing::set_override, py::arg("op"), py::arg("route"));
  m.def("_routing_get_override", &routing::get_override);
  m.def(
      "_routing_route_for", &routing::route_for, py::arg("op"), py::arg("numel"), py::arg("dtype"));
  m.def("_routing_describe", [](const std::string& op) {
    auto info = routing::describe(op);
    return py::make_tuple(info.route, info.origin, rules_to_python(info.rules));
  });
  m.def("_routing_canonical_name", [](const std::string& op) {
    return routing::entry_by_name(op).name;
  });
  m.def("_routing_table_info", [] {
    auto info = routing::table_info();
    py::dict d;
    d["path"] = info.path;
    d["origin"] = info.origin;
    d["loaded"] = info.loaded;
    d["default_route"] = info.default_route;
    d["table"] = info.table;
    py::dict rules;
    for (const auto& [op, list] : info.rules) {
      rules[py::str(op)] = rules_to_python(list);
    }
    d["rules"] = rules;
    d["env_overrides"] = info.env_overrides;
    d["api_overrides"] = info.api_overrides;
    return d;
  });
  m.def("_routing_stats", &routing::stats);
  m.def("_routing_route_counts", &routing::route_counts);
  m.def("_routing_routed_operators", &routing::routed_operators);
  m.def("_routing_fast_operators", &routing::fast_operators);
  m.def("_routing_reaches_router", &routing::reaches_router);
  m.def("_routing_reset_stats", &routing::reset_stats);
  m.def("_routing_set_strict", &routing::set_strict);
  m.def("_routing_strict", &routing::strict);
  m.def("_routing_set_log_flags", &routing::set_log_flags);
  m.def("_routing_log_flags", &routing::log_flags);
  m.def("_routing_set_force_copy_fallback", &routing::set_force_copy_fallback);
  m.def("_routing_force_copy_fallback", &routing::force_copy_fallback);
  m.def("_routing_route_names", &routing::route_names);
  m.def("_routing_rule_dtypes", &routing::rule_dtype_names);
  // What size rules measure on a call whose tensor arguments are `tensors`, in order.
  m.def("_routing_measure", [](const std::vector<at::Tensor>& tensors) {
    routing::CallSize size;
    for (const auto& t : tensors) {
      size.see(t);
    }
    const auto dtype = size.dtype ? routing::rule_dtype_name(*size.dtype) : std::nullopt;
    return std::make_pair(size.numel, dtype);
  });
  m.def("_routing_default_route", [] {
    return std::string(routing::route_name(routing::default_route()));
  });
  m.def("_routing_unavailable_reason", [](const std::string& route) {
    auto r = routing::route_from_name(route);
    TORCH_CHECK(r.has_value(), "unknown route '", route, "'");
    return routing::unavailable_reason(*r);
  });
  m.def("_routing_register_python_kernel", &register_python_kernel);
  m.def("_routing_python_kernel", &python_kernel);
  m.def("_routing_python_kernel_ops", &python_kernel_ops);
}

} // namespace torch_fl
