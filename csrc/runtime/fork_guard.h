#pragma once

#include "macros.h"

// A device runtime such as CUDA cannot be used in a process forked after the parent started it
// (the "bad fork" torch.cuda reports). Accelerators with such a runtime note when they start
// it; a child forked afterwards then reports a bad fork and refuses device work with an error
// that says what to do, instead of the runtime's own "initialization error".

#include <atomic>

namespace torch_fl {

namespace detail {
// Set in a child forked after its parent started the device runtime. Read on every routed call
// (is_current_device), so in_bad_fork() is an inline load rather than a call.
FLAGOS_API extern std::atomic<bool> bad_fork;
} // namespace detail

// Called once the device runtime is started in this process (idempotent, thread-safe).
FLAGOS_API void note_device_runtime_started();

// True in a process forked after its parent started the device runtime.
inline bool in_bad_fork() noexcept {
  return detail::bad_fork.load(std::memory_order_relaxed);
}

// Throws the bad-fork error when in_bad_fork(); `what` names the attempted use.
FLAGOS_API void check_not_in_bad_fork(const char* what);

} // namespace torch_fl
