// The cpu accelerator's device allocator: statistics, caching, empty_cache, per-device
// accounting, adopted native memory and the out-of-memory path.

#include "helpers.h"

#include <c10/core/CPUAllocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

namespace torch_fl::testing {
namespace {

c10::DeviceAllocator& allocator() {
  return *accelerator().device_allocator();
}

// Every test starts from an empty cache so that reuse is decided by the test alone.
class DeviceAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(accelerator().device_count(), 2) << "the suite runs with FLAGOS_CPU_DEVICE_COUNT=2";
    allocator().emptyCache({0, 0});
  }
};

TEST_F(DeviceAllocatorTest, AllocationRaisesAndFreeLowersStatistics) {
  const auto before = stats(0);
  {
    c10::DataPtr p = allocator().allocate(1000);
    ASSERT_NE(p.get(), nullptr);
    EXPECT_EQ(p.device(), flagos(0));
    const auto during = stats(0);
    const auto all = pool(StatType::AGGREGATE);
    // Blocks are rounded to 512 bytes; requested_bytes keeps what was asked for.
    EXPECT_EQ(during.allocated_bytes[all].current - before.allocated_bytes[all].current, 1024);
    EXPECT_EQ(during.requested_bytes[all].current - before.requested_bytes[all].current, 1000);
    EXPECT_EQ(during.reserved_bytes[all].current - before.reserved_bytes[all].current, 1024);
    EXPECT_EQ(during.allocation[all].current - before.allocation[all].current, 1);
    EXPECT_EQ(during.active[all].current - before.active[all].current, 1);
    EXPECT_EQ(during.segment[all].current - before.segment[all].current, 1);
    EXPECT_EQ(during.num_device_alloc - before.num_device_alloc, 1);
    std::memset(p.get(), 0xab, 1000); // the memory is usable
  }
  const auto after = stats(0);
  const auto all = pool(StatType::AGGREGATE);
  EXPECT_EQ(after.allocated_bytes[all].current, before.allocated_bytes[all].current);
  EXPECT_EQ(after.requested_bytes[all].current, before.requested_bytes[all].current);
  EXPECT_EQ(after.allocation[all].current, before.allocation[all].current);
  EXPECT_EQ(after.allocated_bytes[all].freed - before.allocated_bytes[all].freed, 1024);
  // Freed blocks stay cached: still reserved until empty_cache.
  EXPECT_EQ(after.reserved_bytes[all].current - before.reserved_bytes[all].current, 1024);
}

TEST_F(DeviceAllocatorTest, SmallAndLargePoolsAreSeparated) {
  const auto before = stats(0);
  c10::DataPtr small = allocator().allocate(4096);
  c10::DataPtr large = allocator().allocate(size_t(2) << 20);
  const auto during = stats(0);
  const auto sp = pool(StatType::SMALL_POOL);
  const auto lp = pool(StatType::LARGE_POOL);
  EXPECT_EQ(during.allocated_bytes[sp].current - before.allocated_bytes[sp].current, 4096);
  EXPECT_EQ(
      during.allocated_bytes[lp].current - before.allocated_bytes[lp].current, int64_t(2) << 20);
  EXPECT_EQ(
      during.allocated_bytes[pool(StatType::AGGREGATE)].current -
          before.allocated_bytes[pool(StatType::AGGREGATE)].current,
      4096 + (int64_t(2) << 20));
}

TEST_F(DeviceAllocatorTest, FreedBlockIsReusedWithoutNewReservation) {
  const auto requested = requested_bytes(0);
  void* first = nullptr;
  {
    c10::DataPtr p = allocator().allocate(1000);
    first = p.get();
  }
  const auto reserved = reserved_bytes(0);
  const auto device_allocs = stats(0).num_device_alloc;
  c10::DataPtr again = allocator().allocate(900); // rounds to the same 1024-byte block
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(reserved_bytes(0), reserved);
  EXPECT_EQ(stats(0).num_device_alloc, device_allocs);
  EXPECT_EQ(requested_bytes(0) - requested, 900);
}

// Of several cached blocks of one size, the one freed last is handed out first (warm caches).
TEST_F(DeviceAllocatorTest, LastFreedBlockOfASizeIsReusedFirst) {
  void* freed_first = nullptr;
  void* freed_last = nullptr;
  {
    c10::DataPtr a = allocator().allocate(1000);
    c10::DataPtr b = allocator().allocate(1000);
    freed_first = a.get();
    freed_last = b.get();
    a.clear();
  } // b freed here, after a
  c10::DataPtr next = allocator().allocate(1000);
  EXPECT_EQ(next.get(), freed_last);
  c10::DataPtr after = allocator().allocate(1000);
  EXPECT_EQ(after.get(), freed_first);
}

TEST_F(DeviceAllocatorTest, CachedBlockMoreThanTwiceTheSizeIsNotReused) {
  void* big = nullptr;
  {
    c10::DataPtr p = allocator().allocate(4096);
    big = p.get();
  }
  // 4096 > 2 * 512: a 512-byte request gets a block of its own.
  c10::DataPtr small = allocator().allocate(512);
  EXPECT_NE(small.get(), big);
  // 4096 <= 2 * 2048: a 2048-byte request may take the cached block.
  c10::DataPtr medium = allocator().allocate(2048);
  EXPECT_EQ(medium.get(), big);
  // A cached block smaller than the request is never used.
  small.clear();
  const auto device_allocs = stats(0).num_device_alloc;
  c10::DataPtr bigger = allocator().allocate(8192);
  EXPECT_EQ(stats(0).num_device_alloc - device_allocs, 1);
}

TEST_F(DeviceAllocatorTest, EmptyCacheReleasesOnlyUnusedBlocks) {
  const auto start = stats(0);
  const auto all = pool(StatType::AGGREGATE);
  c10::DataPtr kept = allocator().allocate(2048);
  {
    c10::DataPtr dropped = allocator().allocate(8192);
  }
  const auto before = stats(0);
  EXPECT_EQ(before.reserved_bytes[all].current - start.reserved_bytes[all].current, 2048 + 8192);
  allocator().emptyCache({0, 0});
  const auto after = stats(0);
  EXPECT_EQ(after.reserved_bytes[all].current - start.reserved_bytes[all].current, 2048);
  EXPECT_EQ(after.segment[all].current - start.segment[all].current, 1);
  EXPECT_EQ(after.allocated_bytes[all].current - start.allocated_bytes[all].current, 2048);
  EXPECT_EQ(after.num_device_free - before.num_device_free, 1);
  std::memset(kept.get(), 1, 2048); // a live block survives empty_cache
}

// A request served from a larger cached block is accounted at the block's size both ways.
TEST_F(DeviceAllocatorTest, ReusingALargerCachedBlockKeepsStatisticsBalanced) {
  const auto start = stats(0);
  const auto all = pool(StatType::AGGREGATE);
  {
    c10::DataPtr p = allocator().allocate(4096);
  }
  {
    c10::DataPtr p = allocator().allocate(2048);
  } // served by the cached 4096-byte block
  const auto end = stats(0);
  EXPECT_EQ(end.allocated_bytes[all].current, start.allocated_bytes[all].current);
  EXPECT_EQ(end.active_bytes[all].current, start.active_bytes[all].current);
  EXPECT_EQ(end.requested_bytes[all].current, start.requested_bytes[all].current);
}

TEST_F(DeviceAllocatorTest, PeakAndAccumulatedStatisticsReset) {
  const auto all = pool(StatType::AGGREGATE);
  {
    c10::DataPtr p = allocator().allocate(size_t(1) << 16);
  }
  EXPECT_GE(stats(0).allocated_bytes[all].peak, int64_t(1) << 16);
  allocator().resetPeakStats(0);
  EXPECT_EQ(stats(0).allocated_bytes[all].peak, stats(0).allocated_bytes[all].current);
  EXPECT_GT(stats(0).allocated_bytes[all].allocated, 0);
  allocator().resetAccumulatedStats(0);
  const auto reset = stats(0);
  EXPECT_EQ(reset.allocated_bytes[all].allocated, 0);
  EXPECT_EQ(reset.allocated_bytes[all].freed, 0);
  EXPECT_EQ(reset.num_device_alloc, 0);
  EXPECT_EQ(reset.num_device_free, 0);
}

TEST_F(DeviceAllocatorTest, DevicesAreAccountedSeparately) {
  const auto before0 = allocated_bytes(0);
  const auto before1 = allocated_bytes(1);
  c10::DataPtr on1;
  {
    c10::DeviceGuard guard(flagos(1));
    on1 = allocator().allocate(3000);
  }
  EXPECT_EQ(on1.device(), flagos(1));
  EXPECT_EQ(allocated_bytes(1) - before1, 3072);
  EXPECT_EQ(allocated_bytes(0), before0);
  // Pointer ownership, interior pointers included.
  EXPECT_EQ(accelerator().device_from_ptr(on1.get()), flagos(1));
  EXPECT_EQ(accelerator().device_from_ptr(static_cast<char*>(on1.get()) + 2999), flagos(1));
  c10::DataPtr on0 = allocator().allocate(100);
  EXPECT_EQ(accelerator().device_from_ptr(on0.get()), flagos(0));
  // A block freed on device 1 is not handed out on device 0.
  void* freed = on1.get();
  on1.clear();
  EXPECT_EQ(allocated_bytes(1), before1);
  c10::DataPtr reuse0 = allocator().allocate(3000);
  EXPECT_NE(reuse0.get(), freed);
  EXPECT_EQ(reuse0.device(), flagos(0));
}

TEST_F(DeviceAllocatorTest, UnknownPointerBelongsToTheCurrentDevice) {
  int on_stack = 0;
  EXPECT_EQ(accelerator().device_from_ptr(&on_stack), flagos(0));
  c10::DeviceGuard guard(flagos(1));
  EXPECT_EQ(accelerator().device_from_ptr(&on_stack), flagos(1));
}

TEST_F(DeviceAllocatorTest, ZeroBytesAllocatesNothing) {
  const auto before = stats(0);
  c10::DataPtr p = allocator().allocate(0);
  EXPECT_EQ(p.get(), nullptr);
  EXPECT_EQ(p.device(), flagos(0));
  EXPECT_EQ(stats(0).num_device_alloc, before.num_device_alloc);
  EXPECT_EQ(allocated_bytes(0), before.allocated_bytes[pool(StatType::AGGREGATE)].current);
}

TEST_F(DeviceAllocatorTest, RawDeleterReleasesABlock) {
  const auto before = allocated_bytes(0);
  c10::DataPtr p = allocator().allocate(700);
  void* raw = p.release_context(); // the caller now owns the block
  ASSERT_NE(raw, nullptr);
  EXPECT_EQ(allocated_bytes(0) - before, 1024);
  allocator().raw_deleter()(p.get());
  EXPECT_EQ(allocated_bytes(0), before);
  int not_ours = 0;
  EXPECT_THROW(allocator().raw_deleter()(&not_ours), c10::Error);
}

TEST_F(DeviceAllocatorTest, AdoptedNativeMemoryIsAccountedUntilReleased) {
  const auto before = stats(1);
  const auto all = pool(StatType::AGGREGATE);
  c10::DataPtr native = c10::GetCPUAllocator()->allocate(1000);
  void* ptr = native.get();
  c10::DataPtr adopted = accelerator().adopt_native(std::move(native), 1000, 1);
  EXPECT_EQ(adopted.get(), ptr); // zero copy
  EXPECT_EQ(adopted.device(), flagos(1));
  const auto during = stats(1);
  // Adopted memory is counted at its exact size, as allocated and reserved.
  EXPECT_EQ(during.allocated_bytes[all].current - before.allocated_bytes[all].current, 1000);
  EXPECT_EQ(during.reserved_bytes[all].current - before.reserved_bytes[all].current, 1000);
  EXPECT_EQ(during.segment[all].current - before.segment[all].current, 1);
  EXPECT_EQ(during.num_device_alloc - before.num_device_alloc, 1);
  adopted.clear();
  const auto after = stats(1);
  EXPECT_EQ(after.allocated_bytes[all].current, before.allocated_bytes[all].current);
  EXPECT_EQ(after.reserved_bytes[all].current, before.reserved_bytes[all].current);
  EXPECT_EQ(after.num_device_free - before.num_device_free, 1);
}

// The adopted list is intrusive and unlinked from any position: three adoptions released
// middle first, then the rest, each leaving exactly the others listed.
TEST_F(DeviceAllocatorTest, SegmentsListOwnCachedAndAdoptedMemory) {
  const auto listed = [](const void* ptr) -> const MemorySegment* {
    static std::vector<MemorySegment> last;
    last = accelerator().memory_segments();
    for (const auto& seg : last) {
      if (seg.address == reinterpret_cast<uintptr_t>(ptr)) {
        return &seg;
      }
    }
    return nullptr;
  };
  std::vector<c10::DataPtr> adopted;
  std::vector<void*> addresses;
  for (int i = 0; i < 3; ++i) {
    c10::DataPtr native = c10::GetCPUAllocator()->allocate(100 * (i + 1));
    addresses.push_back(native.get());
    adopted.push_back(accelerator().adopt_native(std::move(native), 100 * (i + 1), 1));
  }
  for (int i = 0; i < 3; ++i) {
    const auto* seg = listed(addresses[i]);
    ASSERT_NE(seg, nullptr);
    EXPECT_TRUE(seg->adopted && seg->in_use);
    EXPECT_EQ(seg->device, 1);
    EXPECT_EQ(seg->size, 100u * (i + 1));
  }
  adopted[1].clear();
  EXPECT_EQ(listed(addresses[1]), nullptr);
  EXPECT_NE(listed(addresses[0]), nullptr);
  EXPECT_NE(listed(addresses[2]), nullptr);
  adopted[2].clear(); // the head
  adopted[0].clear(); // the tail
  EXPECT_EQ(listed(addresses[0]), nullptr);
  EXPECT_EQ(listed(addresses[2]), nullptr);

  c10::DeviceGuard guard(flagos(0));
  c10::DataPtr own = allocator().allocate(1000);
  void* own_ptr = own.get();
  const auto* in_use = listed(own_ptr);
  ASSERT_NE(in_use, nullptr);
  EXPECT_TRUE(in_use->in_use && !in_use->adopted);
  EXPECT_EQ(in_use->requested, 1000u);
  EXPECT_EQ(in_use->device, 0);
  own.clear();
  const auto* cached = listed(own_ptr);
  ASSERT_NE(cached, nullptr);
  EXPECT_FALSE(cached->in_use);
  allocator().emptyCache({0, 0});
  EXPECT_EQ(listed(own_ptr), nullptr);
}

TEST_F(DeviceAllocatorTest, AdoptingNullMemoryGivesAnEmptyPointer) {
  c10::DataPtr adopted =
      accelerator().adopt_native(c10::DataPtr(nullptr, c10::Device(c10::kCPU)), 0, 1);
  EXPECT_EQ(adopted.get(), nullptr);
  EXPECT_EQ(adopted.device(), flagos(1));
}

TEST_F(DeviceAllocatorTest, OutOfMemoryThrowsAndIsCounted) {
  {
    c10::DataPtr cached = allocator().allocate(4096);
  }
  const auto before = stats(0);
  EXPECT_GT(before.reserved_bytes[pool(StatType::AGGREGATE)].current, 0);
  // More than any machine has: the host allocation fails even after the cache is emptied.
  const size_t impossible = std::numeric_limits<size_t>::max() / 4;
  try {
    allocator().allocate(impossible);
    FAIL() << "expected c10::OutOfMemoryError";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
  const auto after = stats(0);
  EXPECT_EQ(after.num_ooms - before.num_ooms, 1);
  // The retry emptied the cache first.
  EXPECT_EQ(after.reserved_bytes[pool(StatType::AGGREGATE)].current, 0);
}

TEST_F(DeviceAllocatorTest, MemoryFractionLimitsNewSegmentsPerDevice) {
  const auto total = static_cast<double>(allocator().getMemoryInfo(0).second);
  const auto reserved = [](c10::DeviceIndex d) {
    return stats(d).reserved_bytes[pool(StatType::AGGREGATE)].current;
  };
  EXPECT_EQ(accelerator().memory_fraction(0), 1.0);
  // Room for 64 KiB more on flagos:0.
  const double fraction = (static_cast<double>(reserved(0)) + 65536.0) / total;
  accelerator().set_memory_fraction(fraction, 0);
  EXPECT_DOUBLE_EQ(accelerator().memory_fraction(0), fraction);
  const auto ooms = stats(0).num_ooms;
  {
    c10::DataPtr fits = allocator().allocate(32768);
    EXPECT_NE(fits.get(), nullptr);
    try {
      allocator().allocate(1 << 20);
      FAIL() << "expected c10::OutOfMemoryError past the limit";
    } catch (const c10::OutOfMemoryError& e) {
      EXPECT_NE(std::string(e.what()).find("set_per_process_memory_fraction"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(stats(0).num_ooms - ooms, 1);
    // The limit is flagos:0's only.
    c10::DeviceGuard on_one(flagos(1));
    EXPECT_NE(allocator().allocate(1 << 20).get(), nullptr);
  }
  accelerator().set_memory_fraction(1.0, 0);
  EXPECT_NE(allocator().allocate(1 << 20).get(), nullptr);
  EXPECT_THROW(accelerator().set_memory_fraction(1.5, 0), c10::ValueError);
  EXPECT_THROW(accelerator().set_memory_fraction(0.5, 2), c10::IndexError);
}

TEST_F(DeviceAllocatorTest, MemoryInfoIsSane) {
  const auto [free, total] = allocator().getMemoryInfo(0);
  EXPECT_GT(total, 0u);
  EXPECT_LE(free, total);
  EXPECT_THROW(allocator().getMemoryInfo(2), c10::IndexError);
  EXPECT_THROW(allocator().getDeviceStats(-1), c10::IndexError);
}

} // namespace
} // namespace torch_fl::testing
