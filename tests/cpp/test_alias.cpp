// Zero-copy re-labelling between flagos and native tensors (csrc/aten/alias.h), and one
// operator call through the aliasing fallback.

#include "aten/alias.h"
#include "helpers.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>

#include <optional>

#include <gtest/gtest.h>

namespace torch_fl::testing {
namespace {

at::TensorOptions on_flagos(c10::DeviceIndex index) {
  return at::TensorOptions().device(flagos(index)).dtype(at::kFloat);
}

at::Tensor filled_flagos(c10::DeviceIndex index) {
  return at::arange(24, at::TensorOptions().dtype(at::kFloat)).to(flagos(index));
}

TEST(NativeAlias, SharesMemoryAndMetadata) {
  at::Tensor f = filled_flagos(1).view({4, 6}).slice(1, 1, 5); // strided, offset 1
  at::Tensor n = native_alias(f);
  EXPECT_EQ(n.device(), c10::Device(c10::kCPU));
  EXPECT_EQ(n.data_ptr(), f.data_ptr());
  EXPECT_EQ(n.sizes(), f.sizes());
  EXPECT_EQ(n.strides(), f.strides());
  EXPECT_EQ(n.storage_offset(), f.storage_offset());
  EXPECT_EQ(n.dtype(), f.dtype());
  EXPECT_NE(n.unsafeGetTensorImpl(), f.unsafeGetTensorImpl()); // a new TensorImpl
  EXPECT_EQ(f.device(), flagos(1));                            // the caller's tensor is untouched
  // Writes through the alias are writes to the flagos memory.
  n.fill_(-1.0f);
  at::Tensor back = f.cpu();
  EXPECT_TRUE(at::equal(back, at::full({4, 4}, -1.0f)));
}

TEST(NativeAlias, KeepsTheFlagosStorageAlive) {
  at::Tensor n;
  {
    at::Tensor f = filled_flagos(0);
    n = native_alias(f);
    EXPECT_EQ(f.storage().use_count(), 2u); // the tensor and the alias's DataPtr
    EXPECT_TRUE(is_native_alias_storage(n.storage()));
  }
  const auto allocated = allocated_bytes(0);
  EXPECT_GT(allocated, 0); // still held by the alias
  EXPECT_FLOAT_EQ(n[23].item<float>(), 23.0f);
  n.reset();
  EXPECT_EQ(allocated_bytes(0), allocated - 512); // 24 floats, one 512-byte block
}

// An alias copies its source's layout facts instead of deriving them again: they must equal
// what torch derives for the same sizes and strides, for every memory format, fresh or reused.
TEST(NativeAlias, LayoutFactsMatchTorchsOwn) {
  const at::Tensor base = at::arange(2 * 3 * 4 * 5 * 6, at::TensorOptions().dtype(at::kFloat));
  const std::vector<at::Tensor> sources = {
      base.view({2, 3, 4, 5, 6}).to(flagos(0)),
      base.view({2, 3, 4, 5, 6}).to(flagos(0)).contiguous(at::MemoryFormat::ChannelsLast3d),
      base.view({6, 4, 5, 6}).to(flagos(0)).contiguous(at::MemoryFormat::ChannelsLast),
      base.view({6, 4, 5, 6}).to(flagos(0)).transpose(1, 3),
      base.view({30, 24}).to(flagos(0)).t(),
      base.view({30, 24}).to(flagos(0)).slice(1, 2, 20, 3),
      base.to(flagos(0)).as_strided({4, 4}, {0, 1}), // overlapping
      base.to(flagos(0)).select(0, 7),               // 0-dim, offset 7
      base.to(flagos(0)).narrow(0, 0, 0),            // empty
  };
  for (int round = 0; round < 2; ++round) { // round 1 reuses pooled aliases
    for (const at::Tensor& f : sources) {
      at::Tensor n = native_alias(f);
      // The reference: a fresh CPU tensor given the same geometry by torch itself.
      const at::Tensor ref = at::empty({0}).set_(
          c10::Storage(n.storage()), f.storage_offset(), f.sizes(), f.strides());
      EXPECT_EQ(n.sizes(), ref.sizes());
      EXPECT_EQ(n.strides(), ref.strides());
      EXPECT_EQ(n.numel(), ref.numel());
      EXPECT_EQ(n.storage_offset(), ref.storage_offset());
      for (auto format :
           {at::MemoryFormat::Contiguous,
            at::MemoryFormat::ChannelsLast,
            at::MemoryFormat::ChannelsLast3d}) {
        EXPECT_EQ(n.is_contiguous(format), ref.is_contiguous(format)) << f.sizes();
        EXPECT_EQ(
            n.unsafeGetTensorImpl()->is_strides_like(format),
            ref.unsafeGetTensorImpl()->is_strides_like(format))
            << f.sizes();
      }
      EXPECT_EQ(n.is_non_overlapping_and_dense(), ref.is_non_overlapping_and_dense()) << f.sizes();
      EXPECT_EQ(n.suggest_memory_format(), ref.suggest_memory_format()) << f.sizes();
      release_alias(n);
    }
  }
}

TEST(NativeAlias, AliasStorageIsRecognised) {
  at::Tensor f = filled_flagos(0);
  at::Tensor n = native_alias(f);
  EXPECT_TRUE(is_native_alias_storage(n.storage()));
  EXPECT_FALSE(is_native_alias_storage(f.storage()));
  EXPECT_FALSE(is_native_alias_storage(at::ones({3}).storage()));
  // Only resizable aliases carry an allocator a kernel may grow them with.
  EXPECT_FALSE(n.storage().resizable());
  EXPECT_TRUE(native_alias(f, /*resizable=*/true).storage().resizable());
}

TEST(AliasPool, AReleasedAliasHoldsNoMemoryAndIsReusedExactly) {
  // Other device, dtype, shape, strides, offset and conjugate bit than the first alias has.
  at::Tensor g = at::arange(12, at::TensorOptions().dtype(at::kFloat))
                     .to(at::kComplexFloat)
                     .to(flagos(1))
                     .view({3, 4})
                     .transpose(0, 1)
                     .slice(0, 1, 3)
                     .conj();
  const auto g_refs = g.storage().use_count();
  const auto before = allocated_bytes(0);
  c10::TensorImpl* pooled = nullptr;
  {
    at::Tensor f = filled_flagos(0);
    at::Tensor n = native_alias(f);
    pooled = n.unsafeGetTensorImpl();
    release_alias(n);
    EXPECT_FALSE(n.defined());              // taken into this thread's pool
    EXPECT_EQ(f.storage().use_count(), 1u); // the pooled alias let go of the flagos memory
  }
  EXPECT_EQ(allocated_bytes(0), before); // nothing kept alive by the pool

  // The next alias of this thread reuses the objects, fully re-described.
  at::Tensor n = native_alias(g);
  EXPECT_EQ(n.unsafeGetTensorImpl(), pooled);
  EXPECT_EQ(n.data_ptr(), g.data_ptr());
  EXPECT_EQ(n.dtype(), g.dtype());
  EXPECT_EQ(n.sizes(), g.sizes());
  EXPECT_EQ(n.strides(), g.strides());
  EXPECT_EQ(n.storage_offset(), g.storage_offset());
  EXPECT_TRUE(n.is_conj());
  EXPECT_EQ(n.storage().nbytes(), g.storage().nbytes());
  EXPECT_FALSE(n.storage().resizable());
  EXPECT_EQ(g.storage().use_count(), g_refs + 1); // owning again while in use
  EXPECT_TRUE(at::equal(n.resolve_conj(), g.cpu().resolve_conj()));
}

TEST(AliasPool, AnAliasSomethingElseHoldsIsNotPooled) {
  at::Tensor f = filled_flagos(0);
  at::Tensor n = native_alias(f);
  at::Tensor kept = n; // as a collective's work object keeps its tensors
  release_alias(n);
  EXPECT_TRUE(n.defined());
  at::Tensor view = native_alias(f).view({4, 6}); // a view shares the alias's storage
  at::Tensor m = native_alias(f);
  EXPECT_NE(m.unsafeGetTensorImpl(), n.unsafeGetTensorImpl());
  n.reset();
  kept.reset();
  EXPECT_FLOAT_EQ(view[3][5].item<float>(), 23.0f);
  EXPECT_FLOAT_EQ(m[23].item<float>(), 23.0f);
}

TEST(AliasPool, ARegrownResizableAliasIsEmptiedBeforePooling) {
  at::Tensor f = at::empty({0}, on_flagos(0));
  at::Tensor n = native_alias(f, /*resizable=*/true);
  n.resize_({8});
  n.fill_(2.0f);
  sync_from_alias(f, n); // the caller's storage takes the grown memory over
  release_alias(n);
  at::Tensor r = native_alias(f, /*resizable=*/true);
  EXPECT_TRUE(r.storage().resizable());
  EXPECT_EQ(r.data_ptr(), f.data_ptr());
  EXPECT_TRUE(at::equal(r, at::full({8}, 2.0f)));
  at::Tensor plain = native_alias(filled_flagos(1));
  EXPECT_FALSE(plain.storage().resizable());
}

// Aliases a caller keeps itself (the flagos_python route, with their Python objects): emptied
// only when unshared, then re-pointed at another tensor.
TEST(KeptAlias, IsEmptiedOnlyWhenNothingElseHoldsIt) {
  at::Tensor f = filled_flagos(0);
  at::Tensor n = native_alias(f);
  {
    at::Tensor kept = n;
    EXPECT_FALSE(empty_alias_for_reuse(n, nullptr));
  }
  {
    at::Tensor view = n.view({4, 6}); // shares the alias's storage
    EXPECT_FALSE(empty_alias_for_reuse(n, nullptr));
  }
  {
    // Claimed by a Python object it does not have.
    int not_its_object = 0;
    EXPECT_FALSE(empty_alias_for_reuse(n, &not_its_object));
  }
  at::Tensor grad_tracking = native_alias(f).requires_grad_();
  EXPECT_FALSE(empty_alias_for_reuse(grad_tracking, nullptr)); // autograd state on it
  EXPECT_EQ(f.storage().use_count(), 3u);                      // the tensor and two aliases
  ASSERT_TRUE(empty_alias_for_reuse(n, nullptr));
  EXPECT_EQ(n.storage().data(), nullptr); // no hold on the flagos memory any more
  EXPECT_EQ(f.storage().use_count(), 2u);
  EXPECT_FALSE(empty_alias_for_reuse(at::ones({2}), nullptr)); // not an alias at all
}

TEST(KeptAlias, IsRepointedExactlyInItsOwnModeAndDevice) {
  at::Tensor f = filled_flagos(0);
  at::Tensor n = native_alias(f);
  ASSERT_TRUE(empty_alias_for_reuse(n, nullptr));
  at::Tensor g = at::arange(40, at::TensorOptions().dtype(at::kDouble))
                     .to(flagos(0))
                     .view({5, 8})
                     .t()
                     .slice(0, 2, 7, 2);
  ASSERT_TRUE(repoint_native_alias(n, g));
  EXPECT_EQ(n.data_ptr(), g.data_ptr());
  EXPECT_EQ(n.dtype(), g.dtype());
  EXPECT_EQ(n.sizes(), g.sizes());
  EXPECT_EQ(n.strides(), g.strides());
  EXPECT_EQ(n.storage_offset(), g.storage_offset());
  EXPECT_EQ(n.is_contiguous(), g.is_contiguous());
  EXPECT_TRUE(at::equal(n, g.cpu()));
  ASSERT_TRUE(empty_alias_for_reuse(n, nullptr));
  {
    c10::InferenceMode inference; // made outside inference mode: not usable inside it
    EXPECT_FALSE(repoint_native_alias(n, g));
  }
  EXPECT_EQ(n.storage().data(), nullptr); // a refused re-point changes nothing
}

TEST(SharedAliasStorage, AliasesOfOneStorageShareTheWrittenOnesStorage) {
  at::Tensor f = filled_flagos(0);
  at::Tensor other = filled_flagos(0);
  at::Tensor read = native_alias(f.slice(0, 0, 20));
  at::Tensor written = native_alias(f.slice(0, 4, 24), /*resizable=*/true);
  at::Tensor unrelated = native_alias(other);
  EXPECT_FALSE(read.storage().is_alias_of(written.storage())); // each alias has its own
  SharedAliasStorage shared;
  shared.add(f, read, false);
  shared.add(f, written, true);
  shared.add(other, unrelated, false);
  shared.apply();
  // The written alias's (resizable) storage is the one kept; the views keep their layouts.
  EXPECT_EQ(read.storage().unsafeGetStorageImpl(), written.storage().unsafeGetStorageImpl());
  EXPECT_TRUE(written.storage().resizable());
  EXPECT_FALSE(unrelated.storage().is_alias_of(written.storage()));
  EXPECT_EQ(read.data_ptr(), f.data_ptr());
  EXPECT_EQ(written.data_ptr(), f.slice(0, 4, 24).data_ptr());
  // So a CPU kernel sees the overlap and refuses it, as for two views of one CPU tensor.
  EXPECT_THROW(written.slice(0, 0, 16).copy_(read.slice(0, 0, 16)), c10::Error);
}

TEST(SharedAliasStorage, AnInputThatIsTheOutputGetsTheOutputsAlias) {
  // torch.add(x, y, out=x): TensorIterator knows the output is an input by tensor identity.
  at::Tensor x = filled_flagos(0);
  at::Tensor y = filled_flagos(0);
  at::Tensor x_read = native_alias(x);
  at::Tensor y_read = native_alias(y);
  at::Tensor x_out = native_alias(x, /*resizable=*/true);
  SharedAliasStorage shared;
  shared.add_replaceable(x, x_read, false);
  shared.add_replaceable(y, y_read, false);
  shared.add_replaceable(x, x_out, true);
  shared.apply();
  EXPECT_TRUE(x_read.is_same(x_out));
  EXPECT_FALSE(y_read.is_same(x_out));
  EXPECT_EQ(x_out.data_ptr(), x.data_ptr());
  // A view of x is another tensor: it shares the storage, not the alias.
  at::Tensor view = x.slice(0, 0, 4);
  at::Tensor view_read = native_alias(view);
  at::Tensor out2 = native_alias(x, /*resizable=*/true);
  SharedAliasStorage second;
  second.add_replaceable(view, view_read, false);
  second.add_replaceable(x, out2, true);
  second.apply();
  EXPECT_FALSE(view_read.is_same(out2));
  EXPECT_TRUE(view_read.storage().is_alias_of(out2.storage()));
}

TEST(SharedAliasStorage, NothingSharedIsLeftAlone) {
  at::Tensor a = filled_flagos(0);
  at::Tensor b = filled_flagos(0);
  at::Tensor na = native_alias(a);
  at::Tensor nb = native_alias(b, /*resizable=*/true);
  c10::StorageImpl* before = na.storage().unsafeGetStorageImpl();
  SharedAliasStorage shared;
  shared.add(a, na, false);
  shared.add(b, nb, true);
  shared.apply();
  EXPECT_EQ(na.storage().unsafeGetStorageImpl(), before);
  EXPECT_FALSE(na.storage().is_alias_of(nb.storage()));
}

TEST(FlagosFromNative, ViewOfAnAliasMapsBackToTheOriginalStorage) {
  at::Tensor f = filled_flagos(1);
  at::Tensor n = native_alias(f).view({4, 6}).transpose(0, 1).slice(0, 2, 4);
  at::Tensor back = flagos_from_native(n, 1);
  EXPECT_EQ(back.device(), flagos(1));
  EXPECT_EQ(back.storage().unsafeGetStorageImpl(), f.storage().unsafeGetStorageImpl());
  EXPECT_TRUE(back.storage().is_alias_of(f.storage()));
  EXPECT_EQ(back.sizes(), n.sizes());
  EXPECT_EQ(back.strides(), n.strides());
  EXPECT_EQ(back.storage_offset(), n.storage_offset());
  EXPECT_EQ(back.data_ptr(), n.data_ptr());
}

TEST(FlagosFromNative, FreshNativeMemoryIsAdoptedWithoutCopy) {
  const auto before = allocated_bytes(1);
  at::Tensor back;
  void* ptr = nullptr;
  {
    at::Tensor n = at::arange(100, at::TensorOptions().dtype(at::kFloat)) * 2;
    ptr = n.data_ptr();
    StorageRelabeler relabeler(1);
    back = flagos_from_native(std::move(n), relabeler);
  }
  EXPECT_EQ(back.device(), flagos(1));
  EXPECT_EQ(back.data_ptr(), ptr);
  EXPECT_EQ(allocated_bytes(1) - before, 400); // adopted: accounted on flagos:1
  EXPECT_TRUE(at::equal(back.cpu(), at::arange(100, at::TensorOptions().dtype(at::kFloat)) * 2));
  back.reset();
  EXPECT_EQ(allocated_bytes(1), before);
}

TEST(RelabelFreshInPlace, AFreshResultBecomesFlagosWithoutANewTensor) {
  const auto before = allocated_bytes(1);
  at::Tensor t = at::arange(6, at::TensorOptions().dtype(at::kFloat)) * 3;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  void* ptr = t.data_ptr();
  ASSERT_TRUE(relabel_fresh_in_place(t, 1));
  EXPECT_EQ(t.unsafeGetTensorImpl(), impl);
  EXPECT_EQ(t.device(), flagos(1));
  EXPECT_EQ(t.storage().device(), flagos(1));
  EXPECT_EQ(t.data_ptr(), ptr);
  EXPECT_EQ(allocated_bytes(1) - before, 24);
  EXPECT_TRUE(at::equal(t.cpu(), at::arange(6, at::TensorOptions().dtype(at::kFloat)) * 3));
  t.reset();
  EXPECT_EQ(allocated_bytes(1), before);
}

// The keys and device relabelling writes are the ones torch's own calls would give the tensor
// (set_storage_keep_dtype with the adopted storage, then _change_backend_component_keys), for
// fresh results in and out of inference mode and for a result with an extra key.
TEST(RelabelFreshInPlace, KeysAndDeviceMatchTorchsOwnRelabelling) {
  auto torchs_own = [](const at::Tensor& native, c10::DeviceIndex index) {
    auto twin =
        c10::make_intrusive<c10::TensorImpl>(native.key_set(), native.dtype(), native.device());
    twin->set_python_dispatch(native.key_set().has(c10::DispatchKey::Python));
    twin->set_storage_keep_dtype(at::empty({1}, on_flagos(index)).storage());
    twin->_change_backend_component_keys(flagos(index));
    return std::pair(twin->key_set(), twin->device());
  };
  for (const bool inference : {false, true}) {
    std::optional<c10::InferenceMode> mode;
    if (inference) {
      mode.emplace();
    }
    for (const c10::DeviceIndex index : {0, 1}) {
      at::Tensor t = at::ones({3}) * 2;
      const auto [keys, device] = torchs_own(t, index);
      ASSERT_TRUE(relabel_fresh_in_place(t, index));
      EXPECT_EQ(t.key_set(), keys) << "inference " << inference;
      EXPECT_EQ(t.device(), device);
      EXPECT_EQ(t.is_inference(), inference);
      EXPECT_TRUE(at::equal(t.cpu(), at::full({3}, 2.0)));
    }
  }
  // A key a fresh tensor does not have (here Python's) takes torch's own path and is kept.
  at::Tensor marked = at::ones({2});
  marked.unsafeGetTensorImpl()->set_python_dispatch(true);
  const auto [keys, device] = torchs_own(marked, 0);
  ASSERT_TRUE(relabel_fresh_in_place(marked, 0));
  EXPECT_EQ(marked.key_set(), keys);
  EXPECT_TRUE(marked.key_set().has(c10::DispatchKey::Python));
  EXPECT_EQ(marked.device(), device);
  marked.unsafeGetTensorImpl()->set_python_dispatch(false);
}

TEST(RelabelFreshInPlace, ATensorOrStorageReferencedElsewhereIsLeftAlone) {
  at::Tensor shared = at::ones({4});
  at::Tensor other_ref = shared;
  EXPECT_FALSE(relabel_fresh_in_place(shared, 0));
  EXPECT_EQ(shared.device(), c10::Device(c10::kCPU));

  at::Tensor base = at::ones({4});
  at::Tensor view = base.slice(0, 1, 3); // shares base's storage
  EXPECT_FALSE(relabel_fresh_in_place(view, 0));
  EXPECT_EQ(view.device(), c10::Device(c10::kCPU));

  at::Tensor watched = at::ones({4});
  auto weak = watched.storage().getWeakStorageImpl(); // a weak reference to its storage
  EXPECT_FALSE(relabel_fresh_in_place(watched, 0));
  EXPECT_EQ(watched.device(), c10::Device(c10::kCPU));
  weak.reset();
  EXPECT_TRUE(relabel_fresh_in_place(watched, 0));
  EXPECT_EQ(watched.device(), flagos(0));

  at::Tensor alias = native_alias(filled_flagos(0)); // flagos memory: never adopted
  EXPECT_FALSE(relabel_fresh_in_place(alias, 0));
}

TEST(FlagosFromNative, ResultsSharingANativeStorageShareOneFlagosStorage) {
  at::Tensor n = at::arange(10, at::TensorOptions().dtype(at::kFloat));
  at::Tensor a = n.slice(0, 0, 5);
  at::Tensor b = n.slice(0, 5, 10);
  n.reset();
  StorageRelabeler relabeler(0);
  at::Tensor fa = flagos_from_native(a, relabeler);
  at::Tensor fb = flagos_from_native(b, relabeler);
  EXPECT_EQ(fa.storage().unsafeGetStorageImpl(), fb.storage().unsafeGetStorageImpl());
  EXPECT_EQ(fb.storage_offset(), 5);
  EXPECT_TRUE(at::equal(fb.cpu(), at::arange(5, 10, at::TensorOptions().dtype(at::kFloat))));
}

TEST(FlagosFromNative, ConjugateBitIsCarried) {
  at::Tensor n = at::ones({3}, at::TensorOptions().dtype(at::kComplexFloat)).conj();
  ASSERT_TRUE(n.is_conj());
  at::Tensor back = flagos_from_native(n, 0);
  EXPECT_TRUE(back.is_conj());
  EXPECT_TRUE(native_alias(back).is_conj());
}

TEST(SyncFromAlias, GrowthOfAResizableAliasReachesTheCaller) {
  at::Tensor f = at::empty({2}, on_flagos(0));
  at::Tensor view = f.view({2});
  at::Tensor n = native_alias(f, /*resizable=*/true);
  n.resize_({50});
  n.fill_(3.0f);
  void* grown = n.data_ptr();
  sync_from_alias(f, n); // moves the alias's new memory into f's storage
  EXPECT_EQ(f.sizes(), c10::IntArrayRef({50}));
  EXPECT_EQ(f.data_ptr(), grown);
  EXPECT_EQ(f.device(), flagos(0));
  EXPECT_EQ(view.storage().nbytes(), 50 * sizeof(float)); // every view shares the growth
  EXPECT_TRUE(at::equal(f.cpu(), at::full({50}, 3.0f)));
}

TEST(AliasedFallback, OperatorsRunOnAliasesAndReturnFlagosTensors) {
  at::Tensor a = filled_flagos(1);
  at::Tensor b = at::ones({24}, on_flagos(1));
  at::Tensor c = at::add(a, b, 2);
  EXPECT_EQ(c.device(), flagos(1));
  EXPECT_TRUE(at::equal(c.cpu(), at::arange(24, at::TensorOptions().dtype(at::kFloat)) + 2));
  // In-place results are the caller's own tensor.
  at::Tensor& same = a.mul_(2);
  EXPECT_EQ(same.unsafeGetTensorImpl(), a.unsafeGetTensorImpl());
  EXPECT_FLOAT_EQ(a[3].item<float>(), 6.0f);
}

TEST(AliasedFallback, MixedDevicesAreRejected) {
  at::Tensor a = at::ones({4}, on_flagos(0));
  at::Tensor b = at::ones({4}, on_flagos(1));
  EXPECT_THROW(at::add(a, b), c10::Error);
  EXPECT_THROW(at::add(a, at::ones({4})), c10::Error);
  EXPECT_NO_THROW(at::add(a, at::ones({}))); // 0-dim CPU tensors may join
}

} // namespace
} // namespace torch_fl::testing
