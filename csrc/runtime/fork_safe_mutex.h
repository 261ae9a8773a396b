#pragma once

#include "macros.h"

#include <mutex>

namespace torch_fl {

// A mutex that fork() leaves free in the child. fork() copies only the calling thread, so a lock
// another thread held at that moment would stay held in the child forever, and the child's
// first use of what it guards would hang (a DataLoader forking its workers while other threads
// run flagos operators). Every ForkSafeMutex is taken before a fork and released on both sides,
// as glibc's malloc does for its arenas: the child finds each one free and what it guards
// consistent. They are taken in the order they were made, so code must never wait for one while
// holding another (none of torch_fl's does), nor make one while holding another (making one
// takes the registry's lock, which a fork holds while it takes them all): make them when the
// library loads, or where no other is held.
class FLAGOS_API ForkSafeMutex {
 public:
  ForkSafeMutex();
  ~ForkSafeMutex();
  ForkSafeMutex(const ForkSafeMutex&) = delete;
  ForkSafeMutex& operator=(const ForkSafeMutex&) = delete;

  void lock() {
    mutex_.lock();
  }
  void unlock() {
    mutex_.unlock();
  }
  bool try_lock() {
    return mutex_.try_lock();
  }

 private:
  std::mutex mutex_;
};

} // namespace torch_fl
