// Pinned host memory of the cpu accelerator: pinned blocks, including interior pointers, are
// recognised until they are freed.

#include "helpers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace torch_fl::testing {
namespace {

c10::Allocator& host() {
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

} // namespace
} // namespace torch_fl::testing
