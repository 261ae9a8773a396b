// A ForkSafeMutex held by another thread when fork() is called is free in the child.

#include "runtime/fork_safe_mutex.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace {

TEST(ForkSafeMutex, AChildForkedWhileAnotherThreadHoldsItFindsItFree) {
  alarm(10); // a hang fails the test
  torch_fl::ForkSafeMutex mutex;
  std::atomic<bool> held{false};
  std::thread holder([&] {
    std::lock_guard lock(mutex);
    held = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  while (!held) {
    std::this_thread::yield();
  }
  const pid_t pid = fork(); // waits for the holder to let go, then takes it across the fork
  if (pid == 0) {
    _exit(mutex.try_lock() ? 0 : 1); // a plain std::mutex would still be held here
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  holder.join();
  EXPECT_TRUE(mutex.try_lock()); // and free in the parent too
  mutex.unlock();
  alarm(0);
}

TEST(ForkSafeMutex, OneDestroyedBeforeAForkIsNotTouchedByIt) {
  alarm(10); // a fork handler still locking the destroyed one could hang: fail instead
  auto* gone = new torch_fl::ForkSafeMutex();
  gone->lock(); // were it still registered, the handler would wait on it forever
  gone->unlock();
  delete gone;
  torch_fl::ForkSafeMutex kept;
  const pid_t pid = fork();
  if (pid == 0) {
    _exit(kept.try_lock() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  alarm(0);
}

} // namespace
