// torch_fl.comm._nccl_ext._flagos_nccl: builds torch's own c10d::ProcessGroupNCCL from C++.
//
// The flagos c10d backend's NCCL tier wraps a ProcessGroupNCCL. Its Python class,
// torch.distributed.ProcessGroupNCCL, exists only when the installed torch's Python bindings
// were built with CUDA; on DCU the official CPU torch fronts DTK's device libraries, where the
// class is compiled into libtorch_hip.so (over RCCL) but has no Python binding. This module is
// that binding's one constructor, shipped inside the package so an installed wheel reaches the
// tier without a source checkout. The backend it returns is a plain c10d::Backend to Python
// (or a ProcessGroupNCCL where torch binds that type) and goes to ProcessGroupFlagOS as its inner
// backend. torch_fl/comm/process_group.py prefers torch's own class when it exists.

#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace {

c10::intrusive_ptr<c10d::Backend> create_backend(
    const c10::intrusive_ptr<c10d::Store>& store,
    int rank,
    int size,
    std::chrono::milliseconds timeout,
    const std::string& group_name,
    const std::vector<uint64_t>& global_ranks_in_group,
    bool high_priority_stream) {
  TORCH_CHECK(store, "_flagos_nccl.create_backend: the store is None");
  TORCH_CHECK(
      size > 0 && rank >= 0 && rank < size,
      "_flagos_nccl.create_backend: rank ",
      rank,
      " is not in a group of size ",
      size);
  auto options = c10d::ProcessGroupNCCL::Options::create(high_priority_stream);
  options->timeout = timeout;
  options->group_name = group_name;
  options->global_ranks_in_group = global_ranks_in_group;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, std::move(options));
}

} // namespace

PYBIND11_MODULE(_flagos_nccl, m) {
  m.doc() = "torch's ProcessGroupNCCL, constructed for the flagos c10d backend's NCCL tier";
  // The Python types of Store and Backend are torch's: torch.distributed must be imported first.
  pybind11::module_::import("torch.distributed");
  m.def(
      "create_backend",
      &create_backend,
      pybind11::arg("store"),
      pybind11::arg("rank"),
      pybind11::arg("size"),
      pybind11::arg("timeout"),
      pybind11::arg("group_name") = "",
      pybind11::arg("global_ranks_in_group") = std::vector<uint64_t>{},
      pybind11::arg("high_priority_stream") = false,
      "A ProcessGroupNCCL (RCCL on DCU) over `store` for rank `rank` of `size`.");
  m.def(
      "nccl_version",
      [] { return c10d::getNcclVersion(); },
      "The NCCL (or RCCL) version the library torch's ProcessGroupNCCL uses reports.");
}
