// Bindings of the c10d backend for flagos tensors (csrc/comm/).
//
// ProcessGroupFlagOS derives from c10d::Backend, whose Python type torch registers only when
// torch.distributed is imported; binding it lazily keeps `import torch_fl` from importing
// torch.distributed.

#include "python/comm_bindings.h"

#include "comm/process_group_flagos.h"
#include "comm/work.h"

#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <optional>

namespace py = pybind11;

namespace torch_fl {

// The Python holder of a flagos work. The last reference takes the inner backend's work with
// it, and torch never destroys its own works with the GIL held (its holder lets go of the GIL
// first), so neither does this one. Layout-compatible with c10::intrusive_ptr<T>: pybind11
// copies a returned intrusive_ptr<c10d::Work> into the holder of the registered dynamic type.
template <class T>
class WorkHolder {
 public:
  WorkHolder() = default;
  explicit WorkHolder(T* work)
      : work_(c10::intrusive_ptr<T>::unsafe_reclaim_from_nonowning(work)) {}
  WorkHolder(const WorkHolder&) = default;
  WorkHolder& operator=(const WorkHolder&) = default;
  ~WorkHolder() {
    if (work_ && work_.use_count() == 1 && PyGILState_Check()) {
      py::gil_scoped_release no_gil;
      work_.reset();
    }
  }
  T* get() const {
    return work_.get();
  }

 private:
  c10::intrusive_ptr<T> work_;
};
static_assert(sizeof(WorkHolder<c10d::Work>) == sizeof(c10::intrusive_ptr<c10d::Work>));

} // namespace torch_fl

PYBIND11_DECLARE_HOLDER_TYPE(T, torch_fl::WorkHolder<T>, true)

namespace torch_fl {
namespace {

comm::TensorPath parse_path(const std::string& path) {
  if (path == "zero_copy") {
    return comm::TensorPath::ZeroCopy;
  }
  if (path == "host_staged") {
    return comm::TensorPath::HostStaged;
  }
  TORCH_CHECK(
      false,
      "ProcessGroupFlagOS: unknown tensor path '",
      path,
      "'; valid paths: zero_copy, host_staged");
}

// A part of a split group is built like any flagos group: by torch_fl.comm.process_group, in
// Python, with the parent's tier and path.
c10::intrusive_ptr<c10d::Backend> create_split_part(
    const comm::ProcessGroupFlagOS& parent, const comm::ProcessGroupFlagOS::SplitPart& part) {
  py::gil_scoped_acquire gil;
  auto create = py::module_::import("torch_fl.comm.process_group").attr("create_split_part");
  py::object created = create(
      parent.tier(),
      comm::tensor_path_name(parent.path()),
      parent.profile(),
      parent.skip_reasons(),
      parent.unavailable(),
      parent.requested(),
      part.store,
      part.rank,
      part.size,
      part.timeout,
      part.group_name,
      part.global_ranks);
  return created.cast<c10::intrusive_ptr<comm::ProcessGroupFlagOS>>();
}

py::module_ bind_comm() {
  auto core = py::module_::import("torch_fl._C");
  if (py::hasattr(core, "_comm")) {
    return core.attr("_comm").cast<py::module_>();
  }
  py::module_::import("torch.distributed"); // registers c10d::Backend with pybind11
  auto sub = core.def_submodule("_comm", "c10d backend for flagos tensors");
  using comm::ProcessGroupFlagOS;
  py::class_<ProcessGroupFlagOS, c10d::Backend, c10::intrusive_ptr<ProcessGroupFlagOS>> backend(
      sub,
      "ProcessGroupFlagOS",
      "c10d backend for flagos tensors over an inner gloo or NCCL backend");
  using SplitOptions = ProcessGroupFlagOS::Options;
  py::class_<SplitOptions, c10d::Backend::Options, c10::intrusive_ptr<SplitOptions>>(
      backend,
      "Options",
      "torch's fields of a flagos group's options (timeout, name): what split_group copies")
      .def(py::init<std::chrono::milliseconds>(), py::arg("timeout"))
      .def(
          "__copy__",
          [](const SplitOptions& self) { return c10::make_intrusive<SplitOptions>(self); })
      .def(
          "__deepcopy__",
          [](const SplitOptions& self, const py::dict&) {
            return c10::make_intrusive<SplitOptions>(self);
          },
          py::arg("memo"));
  ProcessGroupFlagOS::set_part_factory(create_split_part);
  backend
      .def(
          py::init([](const c10::intrusive_ptr<c10d::Backend>& inner,
                      const std::string& tier,
                      const std::string& path) {
            return c10::make_intrusive<ProcessGroupFlagOS>(inner, tier, parse_path(path));
          }),
          py::arg("inner"),
          py::arg("tier"),
          py::arg("path"))
      .def(
          "_set_selection",
          &ProcessGroupFlagOS::set_selection,
          py::arg("profile"),
          py::arg("skip_reasons"),
          py::arg("unavailable"),
          py::arg("requested") = std::string())
      .def(
          "_set_group",
          &ProcessGroupFlagOS::set_group,
          py::arg("store"),
          py::arg("global_ranks"),
          py::arg("timeout"))
      .def_property_readonly("options", &ProcessGroupFlagOS::getBackendOptions)
      .def(
          "perform_nocolor_split",
          // torch calls it in the ranks a new_group leaves out when the default group's backend
          // can split (NCCL's must take part in the split that makes the group); flagos groups
          // are never made by splitting a communicator, so there is nothing to take part in.
          [](const ProcessGroupFlagOS&, const py::object& /*device*/) {},
          py::arg("device"))
      .def_property_readonly("tier", &ProcessGroupFlagOS::tier)
      .def_property_readonly("profile", &ProcessGroupFlagOS::profile)
      .def_property_readonly("skip_reasons", &ProcessGroupFlagOS::skip_reasons)
      .def_property_readonly(
          "requested",
          [](const ProcessGroupFlagOS& pg) -> std::optional<std::string> {
            return pg.requested().empty() ? std::nullopt : std::optional(pg.requested());
          })
      .def_property_readonly("unavailable", &ProcessGroupFlagOS::unavailable)
      .def_property_readonly(
          "path", [](const ProcessGroupFlagOS& pg) { return comm::tensor_path_name(pg.path()); })
      .def_property_readonly("inner", &ProcessGroupFlagOS::inner)
      .def_property_readonly(
          "inner_name", [](const ProcessGroupFlagOS& pg) { return pg.inner()->getBackendName(); });
  // Registered, a returned work is found by its own type: pybind11 looks the dynamic type of
  // every returned c10d::Work up, and an unregistered one costs a second, failing lookup.
  py::class_<comm::FlagOSWork, c10d::Work, WorkHolder<comm::FlagOSWork>>(
      sub, "FlagOSWork", "The work of one collective of ProcessGroupFlagOS");
  py::class_<comm::GroupWork, c10d::Work, WorkHolder<comm::GroupWork>>(
      sub,
      "GroupWork",
      "The works of a coalesced group of ProcessGroupFlagOS collectives, as one work");
  return sub;
}

} // namespace

void init_comm_bindings(py::module_& m) {
  m.def(
      "_comm_init",
      &bind_comm,
      "Binds ProcessGroupFlagOS (importing torch.distributed) and returns torch_fl._C._comm.");
}

} // namespace torch_fl
