#pragma once

#include <pybind11/pybind11.h>

namespace torch_fl {

// Adds torch_fl._C._comm_init(), which binds ProcessGroupFlagOS on first use (after
// torch.distributed has registered the c10d types it derives from) and returns the
// torch_fl._C._comm submodule.
void init_comm_bindings(pybind11::module_& m);

} // namespace torch_fl
