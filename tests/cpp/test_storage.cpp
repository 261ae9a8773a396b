// Growing and shrinking flagos storages: the leading bytes survive, every view sees the new
// memory, and the allocator's statistics follow.

#include "helpers.h"
#include "runtime/storage.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/Exception.h>

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

namespace torch_fl::testing {
namespace {

at::TensorOptions on_flagos(c10::DeviceIndex index) {
  return at::TensorOptions().device(flagos(index)).dtype(at::kByte);
}

std::vector<uint8_t> bytes_of(const c10::StorageImpl* storage, size_t n) {
  std::vector<uint8_t> out(n);
  std::memcpy(out.data(), storage->data(), n);
  return out;
}

std::vector<uint8_t> iota(size_t n) {
  std::vector<uint8_t> out(n);
  std::iota(out.begin(), out.end(), uint8_t{1});
  return out;
}

TEST(Storage, GrowingKeepsTheBytes) {
  at::Tensor t = at::empty({100}, on_flagos(0));
  auto* storage = t.storage().unsafeGetStorageImpl();
  const auto pattern = iota(100);
  std::memcpy(storage->mutable_data(), pattern.data(), 100);
  const void* old = storage->data();
  resize_storage_bytes(storage, 5000);
  EXPECT_EQ(storage->nbytes(), 5000u);
  EXPECT_NE(storage->data(), old);
  EXPECT_EQ(bytes_of(storage, 100), pattern);
  EXPECT_EQ(storage->data_ptr().device(), flagos(0));
}

TEST(Storage, ShrinkingKeepsTheLeadingBytes) {
  at::Tensor t = at::empty({256}, on_flagos(0));
  auto* storage = t.storage().unsafeGetStorageImpl();
  const auto pattern = iota(256);
  std::memcpy(storage->mutable_data(), pattern.data(), 256);
  resize_storage_bytes(storage, 16);
  EXPECT_EQ(storage->nbytes(), 16u);
  EXPECT_EQ(bytes_of(storage, 16), std::vector<uint8_t>(pattern.begin(), pattern.begin() + 16));
  resize_storage_bytes(storage, 16); // same size: nothing happens
  EXPECT_EQ(storage->nbytes(), 16u);
}

TEST(Storage, ViewsSeeTheNewMemory) {
  at::Tensor t = at::empty({64}, on_flagos(0));
  at::Tensor view = t.view({8, 8});
  resize_storage_bytes(t.storage().unsafeGetStorageImpl(), 1 << 16);
  EXPECT_EQ(view.storage().nbytes(), size_t(1) << 16);
  EXPECT_EQ(view.data_ptr(), t.data_ptr());
}

TEST(Storage, ResizeStaysOnTheStoragesDeviceAndIsAccounted) {
  at::Tensor t = at::empty({512}, on_flagos(1));
  const auto before1 = allocated_bytes(1);
  const auto before0 = allocated_bytes(0);
  resize_storage_bytes(t.storage().unsafeGetStorageImpl(), 4096);
  // The old 512-byte block went back to the cache, a 4096-byte block replaced it.
  EXPECT_EQ(allocated_bytes(1) - before1, 4096 - 512);
  EXPECT_EQ(allocated_bytes(0), before0);
  EXPECT_EQ(accelerator().device_from_ptr(t.data_ptr()), flagos(1));
}

TEST(Storage, NonResizableStorageIsRejected) {
  at::Tensor t = at::empty({8}, on_flagos(0));
  c10::Storage fixed(
      c10::Storage::use_byte_size_t(),
      8,
      accelerator().device_allocator()->allocate(8),
      accelerator().device_allocator(),
      /*resizable=*/false);
  EXPECT_THROW(resize_storage_bytes(fixed.unsafeGetStorageImpl(), 64), c10::Error);
}

TEST(Storage, TensorResizeGrowsTheStorageKeepingData) {
  at::Tensor t = at::arange(10, at::TensorOptions().dtype(at::kFloat)).to(flagos(0));
  t.resize_({1000});
  EXPECT_GE(t.storage().nbytes(), 1000 * sizeof(float));
  EXPECT_TRUE(
      at::equal(t.slice(0, 0, 10).cpu(), at::arange(10, at::TensorOptions().dtype(at::kFloat))));
}

} // namespace
} // namespace torch_fl::testing
