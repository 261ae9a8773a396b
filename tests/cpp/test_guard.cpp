// The cpu accelerator's device guard: current device, invalid indices, streams (default, pool,
// new, current per thread and device) and events (recording, timing, errors).

#include "helpers.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Exception.h>

#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <thread>

namespace torch_fl::testing {
namespace {

const c10::impl::DeviceGuardImplInterface& guard() {
  return accelerator().guard();
}

TEST(Guard, ReportsTypeAndCount) {
  EXPECT_EQ(guard().type(), c10::DeviceType::PrivateUse1);
  EXPECT_EQ(guard().deviceCount(), 2);
  EXPECT_EQ(accelerator().device_count(), 2);
  EXPECT_STREQ(accelerator().name(), "cpu");
  EXPECT_EQ(accelerator().native_device_type(), c10::DeviceType::CPU);
  EXPECT_EQ(accelerator().native_device(1), c10::Device(c10::kCPU));
}

TEST(Guard, ExchangeDeviceReturnsThePreviousDevice) {
  EXPECT_EQ(guard().getDevice(), flagos(0));
  EXPECT_EQ(guard().exchangeDevice(flagos(1)), flagos(0));
  EXPECT_EQ(guard().getDevice(), flagos(1));
  EXPECT_EQ(guard().exchangeDevice(flagos(0)), flagos(1));
  EXPECT_EQ(guard().getDevice(), flagos(0));
}

TEST(Guard, IndexMinusOneMeansTheCurrentDevice) {
  guard().setDevice(flagos(1));
  EXPECT_EQ(guard().getStream(flagos(-1)).device(), flagos(1));
  EXPECT_EQ(resolve_device_index(-1), 1);
  guard().setDevice(flagos(0));
  EXPECT_EQ(resolve_device_index(-1), 0);
}

TEST(Guard, DeviceGuardRestoresTheDevice) {
  {
    c10::DeviceGuard outer(flagos(1));
    EXPECT_EQ(guard().getDevice(), flagos(1));
    {
      c10::DeviceGuard inner(flagos(0));
      EXPECT_EQ(guard().getDevice(), flagos(0));
    }
    EXPECT_EQ(guard().getDevice(), flagos(1));
  }
  EXPECT_EQ(guard().getDevice(), flagos(0));
}

TEST(Guard, InvalidIndexIsAnIndexErrorNamingTheRange) {
  try {
    guard().setDevice(flagos(2));
    FAIL() << "expected c10::IndexError";
  } catch (const c10::IndexError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("Invalid device flagos:2"), std::string::npos) << message;
    EXPECT_NE(message.find("flagos:0 to flagos:1"), std::string::npos) << message;
    EXPECT_NE(message.find("FLAGOS_CPU_DEVICE_COUNT"), std::string::npos) << message;
  }
  EXPECT_THROW(guard().exchangeDevice(flagos(5)), c10::IndexError);
  EXPECT_THROW(check_device_index(-1), c10::IndexError);
  EXPECT_THROW(resolve_device_index(2), c10::IndexError);
  EXPECT_EQ(guard().getDevice(), flagos(0)); // failures leave the device alone
  // uncheckedSetDevice must not throw; it ignores an invalid index.
  guard().uncheckedSetDevice(flagos(7));
  EXPECT_EQ(guard().getDevice(), flagos(0));
}

TEST(Guard, OtherDeviceTypesAreRejected) {
  EXPECT_THROW(guard().setDevice(c10::Device(c10::kCPU)), c10::Error);
}

TEST(Guard, CurrentDeviceIsPerThread) {
  guard().setDevice(flagos(1));
  c10::Device seen(c10::kCPU);
  std::thread([&] { seen = guard().getDevice(); }).join();
  EXPECT_EQ(seen, flagos(0));
  EXPECT_EQ(guard().getDevice(), flagos(1));
  guard().setDevice(flagos(0));
}

TEST(Streams, DefaultStreamIsCurrentUntilChanged) {
  const auto current = guard().getStream(flagos(0));
  EXPECT_EQ(current, guard().getDefaultStream(flagos(0)));
  EXPECT_EQ(current.id(), 0);
  EXPECT_EQ(current.device(), flagos(0));
  EXPECT_TRUE(guard().queryStream(current));
  guard().synchronizeStream(current);
}

TEST(Streams, PoolStreamsAreRoundRobinOverThirtyTwoIds) {
  std::set<c10::StreamId> ids;
  for (int i = 0; i < 64; ++i) {
    const auto s = guard().getStreamFromGlobalPool(flagos(1), false);
    EXPECT_EQ(s.device(), flagos(1));
    EXPECT_GE(s.id(), 1);
    EXPECT_LE(s.id(), 32);
    ids.insert(s.id());
  }
  EXPECT_EQ(ids.size(), 32u);
}

TEST(Streams, NewStreamsHaveFreshIdsOutsideThePool) {
  std::set<c10::StreamId> ids;
  for (int i = 0; i < 10; ++i) {
    const auto s = guard().getNewStream(flagos(0), 0);
    EXPECT_GT(s.id(), 32);
    ids.insert(s.id());
  }
  EXPECT_EQ(ids.size(), 10u);
}

TEST(Streams, CurrentStreamIsPerDeviceAndPerThread) {
  const auto mine = guard().getNewStream(flagos(1), 0);
  const auto previous = guard().exchangeStream(mine);
  EXPECT_EQ(previous.id(), 0);
  EXPECT_EQ(guard().getStream(flagos(1)), mine);
  EXPECT_EQ(guard().getStream(flagos(0)).id(), 0); // the other device is unaffected
  c10::StreamId other_thread = -1;
  std::thread([&] { other_thread = guard().getStream(flagos(1)).id(); }).join();
  EXPECT_EQ(other_thread, 0);
  EXPECT_EQ(guard().exchangeStream(previous), mine);
  EXPECT_EQ(guard().getStream(flagos(1)).id(), 0);
}

TEST(Streams, StreamGuardRestoresStreamAndDevice) {
  const auto s = guard().getNewStream(flagos(1), 0);
  {
    c10::StreamGuard g(s);
    EXPECT_EQ(guard().getDevice(), flagos(1));
    EXPECT_EQ(guard().getStream(flagos(1)), s);
  }
  EXPECT_EQ(guard().getDevice(), flagos(0));
  EXPECT_EQ(guard().getStream(flagos(1)).id(), 0);
}

TEST(Events, ElapsedTimeMeasuresHostTime) {
  c10::Event start(c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT);
  c10::Event end(c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT);
  const auto stream = guard().getStream(flagos(0));
  start.record(stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end.record(stream);
  EXPECT_TRUE(start.query());
  EXPECT_TRUE(end.query());
  end.synchronize();
  const double ms = start.elapsedTime(end);
  EXPECT_GE(ms, 15.0);
  EXPECT_LT(ms, 5000.0);
  EXPECT_EQ(start.device(), flagos(0));
}

// The backend's own checks, below c10::Event (which checks the flags before calling it).
TEST(Events, ElapsedTimeNeedsTimingEnabled) {
  const auto stream = guard().getStream(flagos(0));
  void* timed = nullptr;
  void* untimed = nullptr;
  guard().record(&timed, stream, 0, c10::EventFlag::BACKEND_DEFAULT);
  guard().record(&untimed, stream, 0, c10::EventFlag::PYTORCH_DEFAULT); // no timing, as on CUDA
  EXPECT_GE(guard().elapsedTime(timed, timed, 0), 0.0);
  try {
    guard().elapsedTime(timed, untimed, 0);
    FAIL() << "expected c10::Error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("enable_timing=True"), std::string::npos) << e.what();
  }
  guard().destroyEvent(timed, 0);
  guard().destroyEvent(untimed, 0);
}

TEST(Events, ElapsedTimeNeedsRecordedEvents) {
  void* recorded = nullptr;
  guard().record(&recorded, guard().getStream(flagos(0)), 0, c10::EventFlag::BACKEND_DEFAULT);
  try {
    guard().elapsedTime(recorded, nullptr, 0);
    FAIL() << "expected c10::Error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be recorded"), std::string::npos) << e.what();
  }
  guard().destroyEvent(recorded, 0);
}

TEST(Events, TimingFlagIsCheckedThroughC10Event) {
  c10::Event start(c10::DeviceType::PrivateUse1);
  c10::Event end(c10::DeviceType::PrivateUse1);
  start.record(guard().getStream(flagos(0)));
  end.record(guard().getStream(flagos(0)));
  EXPECT_THROW(start.elapsedTime(end), c10::Error);
}

TEST(Events, RecordingOnAnotherDevicesStreamIsRejected) {
  void* event = nullptr;
  const auto stream = guard().getStream(flagos(1));
  EXPECT_THROW(guard().record(&event, stream, 0, c10::EventFlag::PYTORCH_DEFAULT), c10::Error);
  guard().record(&event, stream, 1, c10::EventFlag::PYTORCH_DEFAULT);
  EXPECT_NE(event, nullptr);
  EXPECT_TRUE(guard().queryEvent(event));
  guard().block(event, guard().getStream(flagos(0)));
  guard().destroyEvent(event, 1);
}

} // namespace
} // namespace torch_fl::testing
