#pragma once

// Python objects of native aliases, kept between flagos_python calls.
//
// A Python kernel gets each read-only flagos argument as a native alias with a Python object.
// Making that object and the alias, then freeing both, was the larger part of the route's cost
// per argument. A kernel almost always lets go of its arguments, so the route parks the object
// (its alias emptied: it keeps no flagos memory alive) and hands it, re-pointed, to the next
// call. An object the kernel kept, or left a trace on (attributes, weak references, hooks,
// autograd state, another storage), is never reused. All of it runs under the GIL, which is
// what guards the parked objects; builds without a GIL make a fresh object every time.

#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>

namespace torch_fl::python {

// A torch.Tensor object over `flagos`'s memory, typed as the native device (read-only use).
pybind11::object alias_object(const at::Tensor& flagos);

// Takes back an object alias_object made once the kernel is done with it.
void park_alias_object(pybind11::object&& object) noexcept;

} // namespace torch_fl::python
