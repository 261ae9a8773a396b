#pragma once

#include "macros.h"

// A device runtime such as CUDA cannot be used in a process forked after the parent started it
// (the "bad fork" torch.cuda reports). Accelerators with such a runtime note when they start
// it; a child forked afterwards then reports a bad fork and refuses device work with an error
// that says what to do, instead of the runtime's own "initialization error".

namespace torch_fl {

// Called once the device runtime is started in this process (idempotent, thread-safe).
FLAGOS_API void note_device_runtime_started();

// True in a process forked after its parent started the device runtime.
FLAGOS_API bool in_bad_fork() noexcept;

// Throws the bad-fork error when in_bad_fork(); `what` names the attempted use.
FLAGOS_API void check_not_in_bad_fork(const char* what);

} // namespace torch_fl
