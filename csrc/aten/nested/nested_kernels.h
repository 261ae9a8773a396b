#pragma once

#include "macros.h"

namespace torch_fl {

// Registers the strided nested operators that have native kernels ahead of torch's composites
// (native_layout_kernels.h); once per process, with the routing table.
FLAGOS_API void register_nested_kernels();

} // namespace torch_fl
