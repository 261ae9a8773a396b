#include "runtime/fork_safe_mutex.h"

#include <pthread.h>

#include <algorithm>
#include <vector>

namespace torch_fl {
namespace {

struct Registry {
  std::mutex mutex;                 // guards `members`; held from before a fork until after it
  std::vector<std::mutex*> members; // in the order they were made
};

Registry& registry() {
  static auto* r = new Registry(); // never destroyed: a static's mutex may unregister at exit
  return *r;
}

void lock_all_before_fork() {
  auto& r = registry();
  r.mutex.lock();
  for (auto* m : r.members) {
    m->lock();
  }
}

void unlock_all_after_fork() {
  auto& r = registry();
  for (auto it = r.members.rbegin(); it != r.members.rend(); ++it) {
    (*it)->unlock();
  }
  r.mutex.unlock();
}

} // namespace

ForkSafeMutex::ForkSafeMutex() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork(&lock_all_before_fork, &unlock_all_after_fork, &unlock_all_after_fork);
  });
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.members.push_back(&mutex_);
}

ForkSafeMutex::~ForkSafeMutex() {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.members.erase(std::find(r.members.begin(), r.members.end(), &mutex_));
}

} // namespace torch_fl
