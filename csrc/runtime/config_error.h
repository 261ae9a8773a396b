#pragma once

#include "macros.h"

// Configuration problems found while the library loads (when nothing may throw); the Python
// import raises them.

#include <string>

namespace torch_fl {

FLAGOS_API void set_config_error(std::string message);
// Empty when the configuration is valid.
FLAGOS_API std::string config_error();

} // namespace torch_fl
