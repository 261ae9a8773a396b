#include "runtime/fork_guard.h"

#include <c10/util/Exception.h>

#include <pthread.h>

#include <atomic>
#include <mutex>

namespace torch_fl {

std::atomic<bool> detail::bad_fork{false};

namespace {

void mark_child_bad() {
  detail::bad_fork.store(true, std::memory_order_relaxed);
}

} // namespace

void note_device_runtime_started() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(nullptr, nullptr, &mark_child_bad); });
}

void check_not_in_bad_fork(const char* what) {
  TORCH_CHECK(
      !in_bad_fork(),
      "flagos: cannot ",
      what,
      " in a process forked after its parent started the device runtime (the runtime does not "
      "survive fork). Start worker processes with the 'spawn' or 'forkserver' method "
      "(multiprocessing.set_start_method('spawn'), or DataLoader(..., "
      "multiprocessing_context='spawn')), or use the device only in the children.");
}

} // namespace torch_fl
