// Zero-copy mapping of sparse COO tensors between flagos and native (csrc/aten/sparse/).

#include "aten/sparse/sparse_alias.h"
#include "helpers.h"

#include <ATen/ATen.h>

#include <gtest/gtest.h>

namespace torch_fl::testing {
namespace {

// A 3x4 sparse tensor with three entries (one index repeated: uncoalesced), on `device`.
at::Tensor small_sparse(c10::Device device) {
  at::Tensor indices = at::tensor({0, 2, 2, 1, 3, 3}, at::kLong).view({2, 3});
  at::Tensor values = at::tensor({1.0f, 2.0f, 4.0f});
  return at::sparse_coo_tensor(indices.to(device), values.to(device), {3, 4});
}

TEST(SparseAlias, NativeAliasSharesTheParts) {
  at::Tensor f = small_sparse(flagos(1));
  ASSERT_EQ(f.device(), flagos(1));
  at::Tensor n = native_sparse_alias(f);
  EXPECT_EQ(n.device(), c10::Device(c10::kCPU));
  EXPECT_EQ(n.layout(), c10::kSparse);
  EXPECT_EQ(n.sizes(), f.sizes());
  EXPECT_EQ(n._nnz(), f._nnz());
  EXPECT_EQ(n.is_coalesced(), f.is_coalesced());
  EXPECT_EQ(n._indices().data_ptr(), f._indices().data_ptr());
  EXPECT_EQ(n._values().data_ptr(), f._values().data_ptr());
  // A kernel writing the alias's values writes the flagos memory.
  n._values().mul_(10);
  EXPECT_TRUE(at::equal(f._values().cpu(), at::tensor({10.0f, 20.0f, 40.0f})));
}

TEST(SparseAlias, NativeResultsComeBackOnTheirDeviceWithTheirMemory) {
  at::Tensor native = small_sparse(c10::Device(c10::kCPU)).coalesce();
  const auto before = allocated_bytes(1);
  at::Tensor f = flagos_sparse_from_native(native, 1);
  EXPECT_EQ(f.device(), flagos(1));
  EXPECT_EQ(f._indices().device(), flagos(1));
  EXPECT_EQ(f._values().device(), flagos(1));
  EXPECT_TRUE(f.is_coalesced());
  EXPECT_TRUE(at::equal(f.to_dense().cpu(), native.to_dense()));
  // The parts' memory is counted by flagos:1's allocator while the flagos tensor holds it.
  EXPECT_GT(allocated_bytes(1), before);
  f.reset();
  native.reset();
  EXPECT_EQ(allocated_bytes(1), before);
}

TEST(SparseAlias, WriteBackTakesTheKernelsNewParts) {
  at::Tensor f = small_sparse(flagos(0));
  at::Tensor expected = small_sparse(c10::Device(c10::kCPU));
  at::Tensor other =
      at::sparse_coo_tensor(at::tensor({1, 0}, at::kLong).view({2, 1}), at::tensor({7.0f}), {3, 4});
  at::Tensor alias = native_sparse_alias(f, /*resizable=*/true);
  alias.add_(other); // replaces the alias's indices and values with longer ones
  expected.add_(other);
  sync_sparse_from_alias(f, alias);
  EXPECT_EQ(f.device(), flagos(0));
  EXPECT_EQ(f._nnz(), expected._nnz());
  EXPECT_EQ(f._values().device(), flagos(0));
  EXPECT_TRUE(at::equal(f.to_dense().cpu(), expected.to_dense()));
}

} // namespace
} // namespace torch_fl::testing
