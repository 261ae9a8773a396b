// torch_fl._C: Python bindings only; all behaviour lives in the core library.

#include "aten/alias.h"
#include "python/comm_bindings.h"
#include "runtime/accelerator.h"
#include "runtime/config_error.h"
#include "runtime/fork_guard.h"
#include "runtime/generator.h"

#include <ATen/core/CachingHostAllocator.h>
#include <torch/csrc/Generator.h>
#include <torch/csrc/utils/pybind.h>

#include <c10/core/DeviceGuard.h>

namespace py = pybind11;

namespace torch_fl {

void init_routing_bindings(py::module_& m);
void init_cost_bindings(py::module_& m);
void init_graph_bindings(py::module_& m);

namespace {

py::dict stat_dict(const c10::CachingAllocator::Stat& s) {
  py::dict d;
  d["current"] = s.current;
  d["peak"] = s.peak;
  d["allocated"] = s.allocated;
  d["freed"] = s.freed;
  return d;
}

py::dict stat_array_dict(const c10::CachingAllocator::StatArray& a) {
  py::dict d;
  d["all"] = stat_dict(a[0]);
  d["small_pool"] = stat_dict(a[1]);
  d["large_pool"] = stat_dict(a[2]);
  return d;
}

py::dict memory_stats(c10::DeviceIndex index) {
  check_device_index(index);
  const auto s = accelerator().device_allocator()->getDeviceStats(index);
  py::dict d;
  d["allocation"] = stat_array_dict(s.allocation);
  d["segment"] = stat_array_dict(s.segment);
  d["active"] = stat_array_dict(s.active);
  d["inactive_split"] = stat_array_dict(s.inactive_split);
  d["allocated_bytes"] = stat_array_dict(s.allocated_bytes);
  d["reserved_bytes"] = stat_array_dict(s.reserved_bytes);
  d["active_bytes"] = stat_array_dict(s.active_bytes);
  d["inactive_split_bytes"] = stat_array_dict(s.inactive_split_bytes);
  d["requested_bytes"] = stat_array_dict(s.requested_bytes);
  d["num_alloc_retries"] = s.num_alloc_retries;
  d["num_ooms"] = s.num_ooms;
  d["num_device_alloc"] = s.num_device_alloc;
  d["num_device_free"] = s.num_device_free;
  // The rest of torch.cuda.memory_stats's keys (the cpu accelerator's pool never splits blocks,
  // so they stay 0 there).
  d["num_sync_all_streams"] = s.num_sync_all_streams;
  d["max_split_size"] = s.max_split_size;
  d["oversize_allocations"] = stat_dict(s.oversize_allocations);
  d["oversize_segments"] = stat_dict(s.oversize_segments);
  return d;
}

// Microseconds spent in the host allocator's system calls, with torch.cuda's keys (avg rounds
// down, 0 before the first call).
py::dict duration_dict(const c10::CachingAllocator::DurationStat& s) {
  py::dict d;
  d["total"] = s.total;
  d["max"] = s.max;
  d["min"] = s.min;
  d["count"] = s.count;
  d["avg"] = s.count == 0 ? 0 : s.total / s.count;
  return d;
}

// torch.cuda.host_memory_stats's keys for the statistics every host allocator keeps.
py::dict host_memory_stats() {
  const auto s = accelerator().host_allocator()->get_stats();
  py::dict d;
  d["allocations"] = stat_dict(s.allocations);
  d["allocated_bytes"] = stat_dict(s.allocated_bytes);
  d["active_requests"] = stat_dict(s.active_requests);
  d["active_bytes"] = stat_dict(s.active_bytes);
  d["num_host_alloc"] = s.num_host_alloc;
  d["num_host_free"] = s.num_host_free;
  d["host_alloc_time"] = duration_dict(s.host_alloc_time);
  d["host_free_time"] = duration_dict(s.host_free_time);
  return d;
}

c10::Device flagos(c10::DeviceIndex index) {
  return c10::Device(c10::DeviceType::PrivateUse1, index);
}

// A device index from Python: -1 (the current device) or a flagos device's index, checked
// before it is narrowed to c10::DeviceIndex's 8 bits.
c10::DeviceIndex from_python(int64_t index) {
  if (index != -1) {
    check_device_index(index);
  }
  return static_cast<c10::DeviceIndex>(index);
}

// The interop views map plain memory: a sparse or nested tensor has no single storage to map.
void check_strided_for_view(const at::Tensor& t, const char* name) {
  TORCH_CHECK_VALUE(
      t.layout() == c10::kStrided && !t.is_nested(),
      "torch_fl.",
      name,
      " takes strided tensors only, got a ",
      t.is_nested() ? std::string("nested") : c10::str(t.layout()),
      " tensor; map its parts (e.g. a sparse tensor's _indices() and _values(), a nested "
      "tensor's values()) instead");
}

// The device a Python index names (-1: the current one).
c10::DeviceIndex resolve_from_python(int64_t index) {
  return resolve_device_index(from_python(index));
}

} // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_fl C++ core bindings";
  init_routing_bindings(m);
  init_comm_bindings(m);
  init_cost_bindings(m);
  init_graph_bindings(m);
  m.def("_config_error", &config_error);
  m.def("_accelerator_name", [] { return std::string(accelerator().name()); });
  m.def("_native_device_type", [] {
    return c10::DeviceTypeName(accelerator().native_device_type(), /*lower_case=*/true);
  });
  m.def("_device_count", [] { return static_cast<int>(accelerator().device_count()); });
  m.def("_is_in_bad_fork", [] { return in_bad_fork(); });
  m.def("_resolve_device_index", [](int64_t index) {
    return static_cast<int>(resolve_from_python(index));
  });
  m.def("_check_device_index", [](int64_t index) { check_device_index(index); });
  m.def("_current_device", [] {
    return static_cast<int>(accelerator().guard().getDevice().index());
  });
  m.def("_set_device", [](int64_t index) {
    check_device_index(index);
    accelerator().guard().setDevice(flagos(static_cast<c10::DeviceIndex>(index)));
  });
  m.def("_exchange_device", [](int64_t index) {
    if (index < 0) {
      return -1;
    }
    check_device_index(index);
    const auto previous =
        accelerator().guard().exchangeDevice(flagos(static_cast<c10::DeviceIndex>(index)));
    return static_cast<int>(previous.index());
  });
  m.def("_synchronize", [](int64_t index) {
    py::gil_scoped_release no_gil;
    accelerator().guard().synchronizeDevice(resolve_from_python(index));
  });

  m.def("_memory_stats", [](int64_t index) { return memory_stats(resolve_from_python(index)); });
  m.def("_empty_cache", [] {
    py::gil_scoped_release no_gil;
    accelerator().device_allocator()->emptyCache({0, 0});
  });
  m.def("_set_memory_fraction", [](double fraction, int64_t index) {
    accelerator().set_memory_fraction(fraction, resolve_from_python(index));
  });
  m.def("_memory_fraction", [](int64_t index) {
    return accelerator().memory_fraction(resolve_from_python(index));
  });
  m.def("_host_memory_stats", &host_memory_stats);
  m.def("_empty_host_cache", [] {
    py::gil_scoped_release no_gil;
    accelerator().host_allocator()->empty_cache();
  });
  m.def(
      "_reset_peak_host_memory_stats", [] { accelerator().host_allocator()->reset_peak_stats(); });
  m.def("_reset_accumulated_host_memory_stats", [] {
    accelerator().host_allocator()->reset_accumulated_stats();
  });
  m.def("_reset_peak_memory_stats", [](int64_t index) {
    accelerator().device_allocator()->resetPeakStats(resolve_from_python(index));
  });
  m.def("_reset_accumulated_memory_stats", [](int64_t index) {
    accelerator().device_allocator()->resetAccumulatedStats(resolve_from_python(index));
  });
  m.def("_memory_segments", [] {
    py::list out;
    for (const auto& seg : accelerator().memory_segments()) {
      py::dict d;
      d["device"] = static_cast<int>(seg.device);
      d["address"] = seg.address;
      d["size"] = seg.size;
      d["requested"] = seg.requested;
      d["in_use"] = seg.in_use;
      d["adopted"] = seg.adopted;
      out.append(d);
    }
    return out;
  });
  m.def("_mem_get_info", [](int64_t index) {
    return accelerator().device_allocator()->getMemoryInfo(resolve_from_python(index));
  });

  m.def("_default_generator", [](int64_t index) {
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(from_python(index))));
  });

  m.def("_device_properties", [](int64_t index) {
    const auto p = accelerator().properties(resolve_from_python(index));
    py::dict d;
    d["name"] = p.name;
    d["major"] = p.major;
    d["minor"] = p.minor;
    d["total_memory"] = p.total_memory;
    d["multi_processor_count"] = p.multi_processor_count;
    return d;
  });

  m.def(
      "_flagos_to_native_view",
      [](const at::Tensor& t) {
        TORCH_CHECK(
            t.device().type() == c10::DeviceType::PrivateUse1,
            "_flagos_to_native_view expects a flagos tensor, got one on ",
            t.device());
        check_strided_for_view(t, "native_view");
        return pinned_native_alias(t);
      },
      "A native-device tensor over the same memory (zero copy).");
  m.def(
      "_native_to_flagos_view",
      [](const at::Tensor& t, int64_t index) {
        TORCH_CHECK(
            t.device().type() == accelerator().native_device_type(),
            "_native_to_flagos_view expects a ",
            accelerator().native_device_type(),
            " tensor, got one on ",
            t.device());
        check_strided_for_view(t, "flagos_view");
        return flagos_view_of_native(t, resolve_from_python(index));
      },
      py::arg("tensor"),
      py::arg("index") = -1,
      "A flagos tensor over the same memory (zero copy).");
  if (accelerator().native_device_type() == c10::DeviceType::CUDA) {
    // The names other components (distributed, FlagGems) use on CUDA-ABI accelerators.
    m.attr("_flagos_to_cuda_view") = m.attr("_flagos_to_native_view");
    m.attr("_cuda_to_flagos_view") = m.attr("_native_to_flagos_view");
  }
}

} // namespace torch_fl
