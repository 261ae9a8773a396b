#pragma once

#include "macros.h"

// The table of unboxed fast kernels: operator name -> a factory of its PrivateUse1 kernel.
// The router registers a fast kernel instead of the boxed router for the operators listed
// here (when it would register the router for them at all; see register_direct_kernels).

#include <torch/library.h>

#include <string>

namespace torch_fl::fast {

struct Kernel {
  const char* name;     // "aten::add"
  const char* overload; // "Tensor", or "" for the default overload
  torch::CppFunction (*make)();
};

// The kernels of one translation unit (kernels_*.cpp).
struct KernelList {
  const Kernel* begin;
  size_t size;
};
KernelList pointwise_kernels();
KernelList nn_kernels();
KernelList foreach_kernels();

// The fast kernel of an operator ("aten::add.Tensor"), or nullptr.
const Kernel* find(const std::string& canonical);

} // namespace torch_fl::fast
