// torch_fl._C._route_part_costs: the host cost of each part of a routed call, timed in C++ so
// no Python noise enters (benchmarks/route_costs.py prints it). Each part runs `iterations`
// times per round, the parts interleaved over `rounds` rounds; the median round is reported.

#include "aten/alias.h"
#include "runtime/accelerator.h"

#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/record_function.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace py = pybind11;

namespace torch_fl {
namespace {

using Part = std::function<void()>;

double time_ns(const Part& part, int iterations) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    part();
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  return std::chrono::duration<double, std::nano>(elapsed).count() / iterations;
}

std::map<std::string, double> route_part_costs(
    const at::Tensor& flagos, int iterations, int rounds) {
  TORCH_CHECK(
      flagos.device().type() == c10::DeviceType::PrivateUse1,
      "_route_part_costs expects a flagos tensor, got one on ",
      flagos.device());
  TORCH_CHECK(iterations > 0 && rounds > 0, "iterations and rounds must be positive");
  auto& accel = accelerator();
  const auto index = flagos.device().index();
  const at::Tensor native = native_alias(flagos).clone();
  const auto native_options = native.options();
  const auto sizes = flagos.sizes().vec();
  c10::DeviceGuard guard(flagos.device());

  std::vector<std::pair<std::string, Part>> parts = {
      {"native alias (make + free)", [&] { native_alias(flagos); }},
      // What a routed call pays: its aliases go back to the thread's pool when it is done.
      {"native alias (make + release)",
       [&] {
         at::Tensor alias = native_alias(flagos);
         release_alias(alias);
       }},
      {"resizable alias (make + release)",
       [&] {
         at::Tensor alias = native_alias(flagos, /*resizable=*/true);
         release_alias(alias);
       }},
      {"flagos view of native (make + free)", [&] { flagos_view_of_native(native, index); }},
      {"current device", [&] { accel.guard().getDevice(); }},
      {"profiler callback check",
       [&] { at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION); }},
      {"native empty (make + free)", [&] { at::empty(sizes, native_options); }},
      {"native empty + relabel in place",
       [&] {
         at::Tensor t = at::empty(sizes, native_options);
         relabel_fresh_in_place(t, index);
       }},
      {"add, native tensors", [&] { at::add(native, native); }},
      {"add, flagos tensors", [&] { at::add(flagos, flagos); }},
  };
  std::map<std::string, std::vector<double>> samples;
  for (int round = 0; round < rounds; ++round) {
    for (const auto& [name, part] : parts) {
      samples[name].push_back(time_ns(part, iterations));
    }
  }
  accel.guard().synchronizeDevice(index);
  std::map<std::string, double> medians;
  for (auto& [name, values] : samples) {
    std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
    medians[name] = values[values.size() / 2];
  }
  return medians;
}

} // namespace

void init_cost_bindings(py::module_& m) {
  m.def(
      "_route_part_costs",
      &route_part_costs,
      py::arg("tensor"),
      py::arg("iterations") = 2000,
      py::arg("rounds") = 9,
      "Nanoseconds per call of each part of a routed call on `tensor` (a benchmark aid).");
}

} // namespace torch_fl
