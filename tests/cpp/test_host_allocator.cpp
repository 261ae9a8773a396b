// Pinned host memory of the cpu accelerator: pinned blocks, including interior pointers, are
// recognised until they are freed.

#include "helpers.h"

#include <ATen/core/CachingHostAllocator.h>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace torch_fl::testing {
namespace {

at::HostAllocator& host() {
  return *accelerator().host_allocator();
}

TEST(HostAllocator, PinnedBlocksAreRecognisedIncludingInteriorPointers) {
  c10::DataPtr block = host().allocate(1000);
  ASSERT_NE(block.get(), nullptr);
  EXPECT_EQ(block.device(), c10::Device(c10::kCPU)); // pinned memory is host memory
  const auto* begin = static_cast<const char*>(block.get());
  EXPECT_TRUE(accelerator().is_pinned_ptr(begin));
  EXPECT_TRUE(accelerator().is_pinned_ptr(begin + 1));
  EXPECT_TRUE(accelerator().is_pinned_ptr(begin + 999));
  EXPECT_FALSE(accelerator().is_pinned_ptr(begin + 1000)); // one past the end
  EXPECT_FALSE(accelerator().is_pinned_ptr(begin - 1));
  std::memset(block.get(), 7, 1000);
}

TEST(HostAllocator, FreedBlocksAreNoLongerPinned) {
  c10::DataPtr block = host().allocate(256);
  const void* ptr = block.get();
  EXPECT_TRUE(accelerator().is_pinned_ptr(ptr));
  block.clear();
  EXPECT_FALSE(accelerator().is_pinned_ptr(ptr));
}

TEST(HostAllocator, OtherMemoryIsNotPinned) {
  int on_stack = 0;
  std::vector<char> on_heap(64);
  c10::DataPtr device = accelerator().device_allocator()->allocate(64);
  EXPECT_FALSE(accelerator().is_pinned_ptr(&on_stack));
  EXPECT_FALSE(accelerator().is_pinned_ptr(on_heap.data()));
  EXPECT_FALSE(accelerator().is_pinned_ptr(device.get()));
  EXPECT_FALSE(accelerator().is_pinned_ptr(nullptr));
}

TEST(HostAllocator, ManyBlocksAreTrackedIndependently) {
  std::vector<c10::DataPtr> blocks;
  for (size_t i = 1; i <= 16; ++i) {
    blocks.push_back(host().allocate(i * 100));
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    const auto* p = static_cast<const char*>(blocks[i].get());
    EXPECT_TRUE(accelerator().is_pinned_ptr(p + (i + 1) * 100 - 1)) << "block " << i;
  }
  const void* middle = blocks[8].get();
  blocks[8].clear();
  EXPECT_FALSE(accelerator().is_pinned_ptr(middle));
  EXPECT_TRUE(accelerator().is_pinned_ptr(blocks[7].get()));
  EXPECT_TRUE(accelerator().is_pinned_ptr(blocks[9].get()));
}

TEST(HostAllocator, ZeroBytesGivesNoBlock) {
  c10::DataPtr empty = host().allocate(0);
  EXPECT_EQ(empty.get(), nullptr);
}

TEST(HostAllocator, RawDeleterFreesAndUnpins) {
  c10::DataPtr block = host().allocate(128);
  void* ptr = block.get();
  block.release_context();
  EXPECT_TRUE(accelerator().is_pinned_ptr(ptr));
  host().raw_deleter()(ptr);
  EXPECT_FALSE(accelerator().is_pinned_ptr(ptr));
}

TEST(HostAllocator, StatisticsCountLiveBlocksAndPeaks) {
  host().reset_peak_stats();
  const auto before = host().get_stats();
  {
    c10::DataPtr a = host().allocate(1000);
    c10::DataPtr b = host().allocate(24);
    const auto during = host().get_stats();
    EXPECT_EQ(during.allocations.current - before.allocations.current, 2);
    EXPECT_EQ(during.allocated_bytes.current - before.allocated_bytes.current, 1024);
    EXPECT_EQ(during.active_bytes.current, during.allocated_bytes.current);
    EXPECT_EQ(during.num_host_alloc - before.num_host_alloc, 2);
    EXPECT_TRUE(
        host().record_event(
            a.get(),
            a.get_context(),
            c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::PrivateUse1, 0))));
  }
  const auto after = host().get_stats();
  EXPECT_EQ(after.allocations.current, before.allocations.current);
  EXPECT_EQ(after.allocated_bytes.peak - before.allocated_bytes.current, 1024);
  EXPECT_EQ(after.num_host_free - before.num_host_free, 2);
  host().reset_peak_stats();
  EXPECT_EQ(host().get_stats().allocated_bytes.peak, after.allocated_bytes.current);
  host().empty_cache(); // nothing cached: a no-op that must not fail
}

} // namespace
} // namespace torch_fl::testing
