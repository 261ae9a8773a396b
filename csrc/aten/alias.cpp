#include "aten/alias.h"

#include "runtime/accelerator.h"
#include "runtime/fork_safe_mutex.h"

#include <ATen/core/ivalue.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/StorageImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <algorithm>
#include <mutex>
#include <typeinfo>
#include <unordered_map>

namespace torch_fl {
namespace {

// An alias storage's DataPtr holds a reference on the flagos StorageImpl it points into.
void release_flagos_storage(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

// A reference-holding DataPtr on a native storage that we cannot take over.
void release_native_storage(void* ctx) {
  c10::raw::intrusive_ptr::decref(static_cast<c10::StorageImpl*>(ctx));
}

// Storages kept from resizing while a view of another storage type shares their memory (the
// flagos storage of a native_view, the native storage behind a flagos tensor that shares it): a
// resize would free the memory under the view, which the allocator then hands to the next
// tensor. Counted per storage; once its last such view is gone a storage resizes again if it
// could before. (Torch keeps a cpu storage that numpy shares from resizing for the same reason,
// for good.)
class ResizePins {
 public:
  // Pins `impl` for a view whose memory is `view_memory` (a DataPtr holding a reference on
  // `impl` through `plain`): its deleter becomes `pinned`, which unpins before releasing.
  void pin(
      c10::StorageImpl* impl,
      c10::DataPtr& view_memory,
      c10::DeleterFnPtr plain,
      c10::DeleterFnPtr pinned) {
    const bool swapped = view_memory.compare_exchange_deleter(plain, pinned);
    TORCH_INTERNAL_ASSERT(swapped);
    std::lock_guard lock(mutex_);
    auto it = pins_.try_emplace(impl, Pin{0, impl->resizable()}).first;
    ++it->second.views;
    impl->set_resizable(false);
  }

  void unpin(c10::StorageImpl* impl) {
    std::lock_guard lock(mutex_);
    auto it = pins_.find(impl);
    if (it != pins_.end() && --it->second.views == 0) {
      impl->set_resizable(it->second.was_resizable);
      pins_.erase(it);
    }
  }

 private:
  struct Pin {
    size_t views;
    bool was_resizable;
  };
  ForkSafeMutex mutex_;
  std::unordered_map<c10::StorageImpl*, Pin> pins_; // the views hold the storages alive
};

ResizePins& resize_pins() {
  static auto* pins = new ResizePins(); // never destroyed: views may be freed at exit
  return *pins;
}

// The DataPtr of a view that pins the storage it refers to.
void release_pinned_flagos_storage(void* ctx) {
  resize_pins().unpin(static_cast<c10::StorageImpl*>(ctx));
  release_flagos_storage(ctx);
}

void release_pinned_native_storage(void* ctx) {
  resize_pins().unpin(static_cast<c10::StorageImpl*>(ctx));
  release_native_storage(ctx);
}

c10::StorageImpl* flagos_storage_behind(const c10::Storage& storage) {
  const auto& dp = storage.data_ptr();
  if (dp.get_deleter() == &release_flagos_storage ||
      dp.get_deleter() == &release_pinned_flagos_storage) {
    return static_cast<c10::StorageImpl*>(dp.get_context());
  }
  return nullptr;
}

// A storage's memory, moved out of it (the storage is left empty). Inline: re-labelling a
// fresh result, on every routed call, does this.
C10_ALWAYS_INLINE c10::DataPtr take_over_memory(c10::StorageImpl* impl) {
  return impl->set_data_ptr(c10::DataPtr(nullptr, impl->device()));
}

// Ownership of a native storage's memory: taken over when nobody else holds the storage,
// otherwise shared by holding a reference on it.
c10::DataPtr take_native_memory(const c10::Storage& native, bool may_take_over = true) {
  c10::StorageImpl* impl = native.unsafeGetStorageImpl();
  if (may_take_over && native.use_count() == 1) {
    return take_over_memory(impl);
  }
  c10::raw::intrusive_ptr::incref(impl);
  return c10::DataPtr(impl->mutable_data(), impl, &release_native_storage, impl->device());
}

// A storage's weak count (1 while strong references exist and no weak one does), read without
// the two atomic updates of making a weak reference.
uint32_t weak_count(c10::StorageImpl* impl) {
  auto borrowed = c10::intrusive_ptr<c10::StorageImpl>::reclaim(impl);
  const uint32_t count = borrowed.weak_use_count();
  borrowed.release();
  return count;
}

// Gives `dst` the shape and math bits of `src` (a fresh or a reused TensorImpl).
void describe_like(c10::TensorImpl* dst, const c10::TensorImpl* src) {
  dst->set_sizes_and_strides(src->sizes(), src->strides(), src->storage_offset());
  dst->_set_conj(src->is_conj());
  dst->_set_neg(src->is_neg());
}

// The StorageImpl of a native alias. A subclass only to be recognised: a kernel that grows an
// out= alias resizes this same object, which sync_from_alias tells apart from a storage the
// kernel pointed the alias at (set_ and friends), however many of the call's aliases share it.
class AliasStorageImpl final : public c10::StorageImpl {
 public:
  using c10::StorageImpl::StorageImpl;
};

bool is_alias_storage_impl(const c10::StorageImpl* impl) {
  return typeid(*impl) == typeid(AliasStorageImpl);
}

// The TensorImpl of a native alias. A subclass only to reach TensorImpl's protected layout
// fields: an alias copies what its flagos tensor has already worked out (sizes, strides,
// numel and the contiguity flags) where set_sizes_and_strides would derive it all again; that
// was half the cost of an alias. Kernels see a plain TensorImpl (nothing is overridden).
class AliasImpl final : public c10::TensorImpl {
 public:
  using c10::TensorImpl::TensorImpl;

  void describe_like(const c10::TensorImpl& src) {
    // Pointers to members, formed through this class, read the protected fields of any
    // TensorImpl (C++ allows it for pointers to members only).
    constexpr auto policy_at_least = &AliasImpl::matches_policy;
    if (src.has_symbolic_sizes_strides() ||
        (src.*policy_at_least)(SizesStridesPolicy::CustomStrides)) {
      torch_fl::describe_like(this, &src); // its getters may be overridden: ask them
      return;
    }
    constexpr auto sizes_and_strides = &AliasImpl::sizes_and_strides_;
    constexpr auto numel = &AliasImpl::numel_;
    sizes_and_strides_ = src.*sizes_and_strides;
    numel_ = src.*numel;
    storage_offset_ = src.storage_offset();
    is_contiguous_ = src.is_contiguous(c10::MemoryFormat::Contiguous);
    is_channels_last_contiguous_ = src.is_contiguous(c10::MemoryFormat::ChannelsLast);
    is_channels_last_3d_contiguous_ = src.is_contiguous(c10::MemoryFormat::ChannelsLast3d);
    is_channels_last_ = src.is_strides_like(c10::MemoryFormat::ChannelsLast);
    is_channels_last_3d_ = src.is_strides_like(c10::MemoryFormat::ChannelsLast3d);
    is_non_overlapping_and_dense_ = src.is_non_overlapping_and_dense();
    _set_conj(src.is_conj());
    _set_neg(src.is_neg());
  }

  // Makes a native tensor a flagos:index one after its storage was adopted: what
  // set_storage_keep_dtype and _change_backend_component_keys do, but for a tensor with the keys
  // of a fresh native tensor (a kernel's usual result) written straight from the keys of a fresh
  // flagos tensor, which costs a fraction of working them out per call.
  static void relabel_as_flagos(c10::TensorImpl& impl, c10::Device device);
};

// The dispatch keys a fresh tensor of `device` gets out of and in inference mode.
struct FreshKeys {
  c10::DispatchKeySet normal;
  c10::DispatchKeySet inference;
};

FreshKeys fresh_keys(c10::DispatchKey backend, c10::Device device) {
  auto make = [&] {
    return c10::make_intrusive<c10::TensorImpl>(
               c10::DispatchKeySet(backend), caffe2::TypeMeta::Make<float>(), device)
        ->key_set();
  };
  const c10::DispatchKeySet normal = make();
  c10::InferenceMode inference_mode;
  return FreshKeys{normal, make()};
}

// What every alias and re-labelling needs to know about this build's accelerator, resolved
// once: reading it through the Accelerator interface cost a virtual call per fact per tensor,
// and the per-call code that every routed operator runs is short of instruction cache, not of
// cycles (callgrind, docs/performance.md).
struct HotFacts {
  c10::DeviceType native_type;
  c10::DispatchKey native_key;
  bool native_indexed; // the native device of flagos:i is native:i (else the index-less cpu)
  FreshKeys native_keys;
  FreshKeys flagos_keys;
  Accelerator* accelerator;
  c10::DeviceAllocator* device_allocator;

  c10::Device native_device(c10::DeviceIndex index) const {
    return native_indexed ? c10::Device(native_type, index) : c10::Device(native_type);
  }
};

HotFacts make_hot_facts() {
  Accelerator& accel = accelerator();
  const c10::Device probe = accel.native_device(0);
  return HotFacts{
      accel.native_device_type(),
      accel.native_dispatch_key(),
      probe.has_index(),
      fresh_keys(accel.native_dispatch_key(), probe),
      fresh_keys(c10::DispatchKey::PrivateUse1, c10::Device(c10::DeviceType::PrivateUse1, 0)),
      &accel,
      accel.device_allocator()};
}

C10_ALWAYS_INLINE const HotFacts& hot_facts() {
  static const HotFacts facts = make_hot_facts();
  return facts;
}

void AliasImpl::relabel_as_flagos(c10::TensorImpl& impl, c10::Device device) {
  constexpr auto key_set = &AliasImpl::key_set_;
  constexpr auto device_opt = &AliasImpl::device_opt_;
  const c10::DispatchKeySet keys = impl.key_set();
  const HotFacts& facts = hot_facts();
  if (keys == facts.native_keys.normal) {
    impl.*key_set = facts.flagos_keys.normal;
  } else if (keys == facts.native_keys.inference) {
    impl.*key_set = facts.flagos_keys.inference;
  } else {
    impl._change_backend_component_keys(device); // other keys (Python, functorch, ...): keep them
  }
  impl.*device_opt = device;
}

void describe_alias(c10::TensorImpl* alias, const c10::TensorImpl* src) {
  // Every alias is made by native_alias as an AliasImpl.
  static_cast<AliasImpl*>(alias)->describe_like(*src);
}

} // namespace

bool is_native_alias_storage(const c10::Storage& storage) {
  return flagos_storage_behind(storage) != nullptr;
}

namespace {

// Per-thread recycling of alias objects. An alias costs a TensorImpl, a StorageImpl and a
// version counter, made and freed on every routed call; a call that is done with its aliases
// hands them back (release_alias) when nothing else holds them, with their memory reference
// dropped, and the next alias of this thread reuses them. A pooled alias therefore keeps no
// flagos memory alive, and no other thread ever sees it.
//
// The pool is plain data (trivially destructible), so reaching it is one thread-local lookup
// with no initialisation guard; a second thread-local, touched once per thread, frees what is
// left in it when the thread exits.
constexpr size_t kAliasPoolCapacity = 16;

struct AliasPool {
  c10::TensorImpl* slots[kAliasPoolCapacity]; // each holds one reference
  uint8_t size;
  bool cleanup_registered;

  at::Tensor pop() {
    return at::Tensor(
        c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>::reclaim(slots[--size]));
  }
  void push(at::Tensor&& alias);
};
thread_local AliasPool alias_pool{};

struct AliasPoolCleanup {
  ~AliasPoolCleanup() {
    auto& pool = alias_pool;
    while (pool.size > 0) {
      pool.pop();
    }
  }
};

void AliasPool::push(at::Tensor&& alias) {
  if (C10_UNLIKELY(!cleanup_registered)) {
    static thread_local AliasPoolCleanup cleanup; // registers its destructor for this thread
    (void)cleanup;
    cleanup_registered = true;
  }
  slots[size++] = alias.unsafeReleaseTensorImpl();
}

// The dispatch keys a fresh alias gets in and out of inference mode; a pooled alias must
// still have them (nothing added a Python key, autograd keys or others).
c10::DispatchKeySet fresh_alias_keys(bool inference) {
  const FreshKeys& keys = hot_facts().native_keys;
  return inference ? keys.inference : keys.normal;
}

c10::DataPtr alias_data_ptr(c10::StorageImpl* flagos, const c10::Device& native_device) {
  c10::raw::intrusive_ptr::incref(flagos);
  return c10::DataPtr(flagos->mutable_data(), flagos, &release_flagos_storage, native_device);
}

// Points a pooled alias at `flagos`'s memory and layout.
void repoint_alias(
    c10::TensorImpl* impl,
    const c10::TensorImpl* src,
    const c10::Device& native_device,
    bool resizable) {
  c10::StorageImpl* storage = src->storage().unsafeGetStorageImpl();
  c10::StorageImpl* alias_storage = impl->storage().unsafeGetStorageImpl();
  if (!resizable || storage->data() != nullptr) {
    alias_storage->set_data_ptr_noswap(alias_data_ptr(storage, native_device));
  }
  alias_storage->set_nbytes(storage->nbytes());
  if (C10_UNLIKELY(resizable || alias_storage->resizable())) {
    alias_storage->set_allocator(resizable ? accelerator().native_allocator() : nullptr);
    alias_storage->set_resizable(resizable);
  }
  if (impl->dtype() != src->dtype()) {
    impl->set_storage_and_dtype(impl->storage(), src->dtype());
  }
  describe_alias(impl, src);
}

// A kept alias can be re-pointed for this call when it is on the call's native device and in
// the current inference mode (its dispatch keys depend on that mode).
bool alias_fits(c10::TensorImpl* impl, const c10::Device& native_device) {
  return impl->device() == native_device &&
         impl->is_inference() == c10::InferenceMode::is_enabled();
}

// A new alias, for when this thread's pool has none that fits.
C10_NOINLINE at::Tensor make_alias(
    const at::Tensor& flagos, const c10::Device& native_device, bool resizable) {
  const auto* src = flagos.unsafeGetTensorImpl();
  c10::StorageImpl* storage = src->storage().unsafeGetStorageImpl();
  // An empty out= tensor gets a plain null DataPtr: with a context it would test true, and a
  // native resize would then issue a zero-byte device copy from it. Growing it hands the new
  // memory to sync_from_alias either way.
  c10::DataPtr data = !resizable || storage->data() != nullptr
                          ? alias_data_ptr(storage, native_device)
                          : c10::DataPtr(nullptr, native_device);
  auto alias_storage = c10::make_intrusive<AliasStorageImpl>(
      c10::StorageImpl::use_byte_size_t(),
      storage->nbytes(),
      std::move(data),
      resizable ? accelerator().native_allocator() : nullptr,
      resizable);
  auto alias = at::detail::make_tensor<AliasImpl>(
      c10::Storage(std::move(alias_storage)),
      c10::DispatchKeySet(hot_facts().native_key),
      flagos.dtype());
  describe_alias(alias.unsafeGetTensorImpl(), src);
  return alias;
}

// True when nothing but `alias` refers to its objects and no kernel changed what a fresh alias
// would not have: then it can be emptied and pooled. `pyobject` is the Python object the alias
// may have (null: none).
bool recyclable(const at::Tensor& alias, const void* pyobject) {
  auto* impl = alias.unsafeGetTensorImpl();
  if (alias.use_count() != 1 || alias.weak_use_count() != 1 || !impl->has_storage() ||
      typeid(*impl) != typeid(AliasImpl)) {
    return false;
  }
  const c10::Storage& storage = impl->storage();
  c10::StorageImpl* simpl = storage.unsafeGetStorageImpl();
  return storage.use_count() == 1 && weak_count(simpl) == 1 && is_alias_storage_impl(simpl) &&
         (simpl->data_ptr().get_deleter() == &release_flagos_storage ||
          simpl->data_ptr().get() == nullptr) &&
         impl->key_set() == fresh_alias_keys(impl->is_inference()) &&
         impl->autograd_meta() == nullptr && !impl->is_wrapped_number() &&
         impl->allow_tensor_metadata_change() && !impl->has_symbolic_sizes_strides() &&
         impl->get_backend_meta() == nullptr && impl->pyobj_slot()->load_pyobj() == pyobject &&
         simpl->pyobj_slot()->load_pyobj() == nullptr;
}

// Drops an alias's reference on the flagos memory now, not when the alias is next used.
void empty_alias(const at::Tensor& alias) {
  c10::StorageImpl* storage = alias.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, storage->device()));
}

} // namespace

at::Tensor native_alias(const at::Tensor& flagos, bool resizable) {
  // A kernel may grow a written alias only where the flagos storage may grow (not one made
  // over memory flagos does not own, e.g. from DLPack), so the native resize refuses as it
  // would for a native tensor over such memory.
  resizable = resizable && flagos.unsafeGetTensorImpl()->storage().resizable();
  const c10::Device native_device = hot_facts().native_device(flagos.device().index());
  auto& pool = alias_pool;
  if (C10_LIKELY(pool.size != 0)) {
    at::Tensor alias = pool.pop();
    auto* impl = alias.unsafeGetTensorImpl();
    if (C10_LIKELY(alias_fits(impl, native_device))) {
      repoint_alias(impl, flagos.unsafeGetTensorImpl(), native_device, resizable);
      return alias;
    }
  }
  return make_alias(flagos, native_device, resizable);
}

at::Tensor pinned_native_alias(const at::Tensor& flagos) {
  c10::StorageImpl* storage = flagos.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl();
  at::Tensor alias = native_alias(flagos, /*resizable=*/false);
  resize_pins().pin(
      storage,
      alias.unsafeGetTensorImpl()->storage().unsafeGetStorageImpl()->_mutable_data_ptr_no_checks(),
      &release_flagos_storage,
      &release_pinned_flagos_storage);
  return alias;
}

void release_alias(at::Tensor& alias) noexcept {
  auto& pool = alias_pool;
  if (!alias.defined() || pool.size == kAliasPoolCapacity ||
      !empty_alias_for_reuse(alias, nullptr)) {
    return;
  }
  pool.push(std::move(alias));
}

bool repoint_native_alias(const at::Tensor& alias, const at::Tensor& flagos) {
  auto* impl = alias.unsafeGetTensorImpl();
  const c10::Device native_device = hot_facts().native_device(flagos.device().index());
  if (!alias_fits(impl, native_device)) {
    return false;
  }
  repoint_alias(impl, flagos.unsafeGetTensorImpl(), native_device, /*resizable=*/false);
  return true;
}

bool empty_alias_for_reuse(const at::Tensor& alias, const void* pyobject) noexcept {
  try {
    if (!recyclable(alias, pyobject)) {
      return false;
    }
  } catch (...) { // the first call makes the reference keys; if that fails, just do not reuse
    return false;
  }
  empty_alias(alias);
  return true;
}

void SharedAliasStorage::add(const at::Tensor& flagos, const at::Tensor& alias, bool written) {
  add_entry(flagos, alias, nullptr, written);
}

void SharedAliasStorage::add_replaceable(
    const at::Tensor& flagos, at::Tensor& alias, bool written) {
  add_entry(flagos, alias, &alias, written);
}

void SharedAliasStorage::add_list_element(
    const at::Tensor& flagos, c10::IValue& list, size_t index) {
  add_entry(flagos, list.toTensorList().get(index), nullptr, false);
  entries_.back().list = &list;
  entries_.back().list_index = index;
}

void SharedAliasStorage::add_entry(
    const at::Tensor& flagos, const at::Tensor& alias, at::Tensor* holder, bool written) {
  if (!alias.defined()) {
    return;
  }
  // unsafe_storage: no virtual call, and empty for the tensors without one (sparse aliases,
  // which take part only in handing a written alias to the same tensor's read arguments).
  // Empty storages take part too: `torch.mul(a, b, out=a)` on an empty `a` must hand the
  // kernel one tensor for both, or it resizes `a` where natively it refuses.
  const c10::Storage& storage = flagos.unsafeGetTensorImpl()->unsafe_storage();
  const bool has_storage = alias.unsafeGetTensorImpl()->unsafe_storage() && storage;
  entries_.push_back(
      {has_storage ? storage.unsafeGetStorageImpl() : nullptr,
       flagos.unsafeGetTensorImpl(),
       alias.unsafeGetTensorImpl(),
       holder,
       written});
}

// `torch.add(x, y, out=x)`: natively the output *is* the first input, and TensorIterator refuses
// to resize it to the broadcast shape; two aliases would let it resize x. A read argument that
// is the same flagos tensor as a written one is handed the written one's alias. (Two written
// arguments keep their own aliases: each is synced back to its tensor after the call.)
void SharedAliasStorage::hand_written_aliases_to_their_inputs() {
  for (const Entry& w : entries_) {
    if (!w.written) {
      continue;
    }
    for (Entry& e : entries_) {
      if (e.written || e.flagos_tensor != w.flagos_tensor || e.alias == w.alias ||
          (e.holder == nullptr && e.list == nullptr)) {
        continue; // not this tensor, or nowhere to hand the alias to
      }
      at::Tensor written_alias(c10::intrusive_ptr<c10::TensorImpl>::reclaim_copy(w.alias));
      if (e.holder != nullptr) {
        release_alias(*e.holder);
        *e.holder = std::move(written_alias);
      } else {
        e.list->toTensorList().set(e.list_index, std::move(written_alias));
      }
      e.alias = w.alias;
    }
  }
}

void SharedAliasStorage::apply() {
  const size_t n = entries_.size();
  if (n < 2) {
    return;
  }
  // Most calls have no two arguments over one storage, nor one storage-less tensor twice: find
  // out cheaply (foreach operators pass hundreds of tensors).
  c10::SmallVector<const void*, 8> sorted;
  for (const Entry& e : entries_) {
    sorted.push_back(e.flagos != nullptr ? static_cast<const void*>(e.flagos) : e.flagos_tensor);
  }
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) {
    return;
  }
  hand_written_aliases_to_their_inputs();
  for (Entry& e : entries_) {
    if (e.flagos == nullptr) {
      continue; // no storage to share
    }
    const Entry* first = nullptr;
    const Entry* first_written = nullptr;
    for (const Entry& c : entries_) {
      if (c.flagos == e.flagos) {
        first = first != nullptr ? first : &c;
        first_written = first_written != nullptr || !c.written ? first_written : &c;
      }
    }
    const Entry* canonical = first_written != nullptr ? first_written : first;
    const c10::Storage& shared = canonical->alias->unsafe_storage();
    if (canonical->alias != e.alias && !e.alias->unsafe_storage().is_alias_of(shared)) {
      e.alias->set_storage_keep_dtype(shared);
    }
  }
}

c10::Storage StorageRelabeler::to_flagos(const c10::Storage& native, bool may_take_over) {
  if (auto* origin = flagos_storage_behind(native)) {
    return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(origin));
  }
  c10::StorageImpl* key = native.unsafeGetStorageImpl();
  for (const auto& [impl, flagos] : seen_) {
    if (impl == key) {
      return flagos;
    }
  }
  auto& accel = accelerator();
  const size_t nbytes = native.nbytes();
  const bool take_over =
      may_take_over && ownership_ == Ownership::TakeOverFresh && native.use_count() == 1;
  // Memory taken over grows as its native storage could (not a file mapping's). Memory shared
  // with a native storage someone else may still hold pins that storage while the flagos one
  // lives (see ResizePins); a view made to share it (flagos_view) does not grow either, which
  // would silently part it from the native tensor.
  bool resizable = key->resizable();
  c10::DataPtr memory = take_native_memory(native, take_over);
  if (!take_over) {
    resize_pins().pin(key, memory, &release_native_storage, &release_pinned_native_storage);
    resizable = resizable && ownership_ == Ownership::TakeOverFresh;
  }
  c10::Storage flagos(
      c10::make_intrusive<c10::StorageImpl>(
          c10::StorageImpl::use_byte_size_t(),
          nbytes,
          accel.adopt_native(std::move(memory), nbytes, index_),
          accel.device_allocator(),
          resizable));
  seen_.emplace_back(key, flagos);
  return flagos;
}

at::Tensor flagos_from_native(const at::Tensor& native, StorageRelabeler& relabeler) {
  const auto* src = native.unsafeGetTensorImpl();
  TORCH_CHECK(
      native.layout() == c10::kStrided,
      "flagos holds strided and sparse COO tensors only; a kernel returned a ",
      native.layout(),
      " tensor (keep compressed sparse tensors on the cpu, or convert them there with "
      ".to_sparse_coo() or .to_dense())");
  TORCH_CHECK_NOT_IMPLEMENTED(
      !native.is_quantized(),
      "flagos does not hold quantized tensors; a kernel returned a ",
      native.scalar_type(),
      " tensor. Quantize and run quantized kernels on the cpu, and keep flagos tensors in "
      "non-quantized dtypes");
  // A result someone else still holds (a Python kernel that kept the tensor it returned) keeps
  // its memory: taking it over would leave their tensor without any.
  auto result = at::detail::make_tensor<c10::TensorImpl>(
      relabeler.to_flagos(native.storage(), /*may_take_over=*/native.use_count() == 1),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      native.dtype());
  describe_like(result.unsafeGetTensorImpl(), src);
  return result;
}

at::Tensor flagos_from_native(const at::Tensor& native, c10::DeviceIndex index) {
  StorageRelabeler relabeler(index);
  return flagos_from_native(native, relabeler);
}

at::Tensor flagos_view_of_native(const at::Tensor& native, c10::DeviceIndex index) {
  StorageRelabeler relabeler(index, StorageRelabeler::Ownership::Share);
  return flagos_from_native(native, relabeler);
}

bool relabel_fresh_in_place(at::Tensor& native, c10::DeviceIndex index, size_t owners) {
  auto* impl = native.unsafeGetTensorImpl();
  if (native.use_count() != owners || native.weak_use_count() != 1 || !impl->has_storage() ||
      !impl->allow_tensor_metadata_change()) {
    return false;
  }
  const HotFacts& facts = hot_facts();
  const c10::DispatchKeySet keys = impl->key_set();
  // A kernel's usual result has exactly the keys of a fresh native tensor (so it is strided);
  // others (Python, functorch keys) are checked in full.
  const bool usual = keys == facts.native_keys.normal || keys == facts.native_keys.inference;
  if (!usual && (!keys.has(facts.native_key) || impl->layout() != c10::kStrided)) {
    return false;
  }
  const c10::Storage& storage = impl->storage();
  c10::StorageImpl* simpl = storage.unsafeGetStorageImpl();
  if (storage.use_count() != 1 || weak_count(simpl) != 1 ||
      flagos_storage_behind(storage) != nullptr || !simpl->resizable()) {
    return false;
  }
  const size_t nbytes = simpl->nbytes();
  simpl->set_data_ptr_noswap(
      facts.accelerator->adopt_native(take_over_memory(simpl), nbytes, index));
  simpl->set_allocator(facts.device_allocator);
  AliasImpl::relabel_as_flagos(*impl, c10::Device(c10::DeviceType::PrivateUse1, index));
  return true;
}

at::Tensor ResultRelabeler::operator()(at::Tensor t) {
  if (!t.defined() || t.device().type() != native_type_) {
    return t;
  }
  if (in_place_ && relabel_fresh_in_place(t, index_)) {
    return t;
  }
  if (!relabeler_) {
    relabeler_.emplace(index_);
  }
  return flagos_from_native(t, *relabeler_);
}

void sync_from_alias(const at::Tensor& original, const at::Tensor& alias) {
  auto* dst = original.unsafeGetTensorImpl();
  const auto* src = alias.unsafeGetTensorImpl();
  const c10::Storage& alias_storage = src->storage();
  c10::StorageImpl* behind = flagos_storage_behind(alias_storage);
  const bool both_empty = alias_storage.data() == nullptr && dst->storage().data() == nullptr;
  if (behind != dst->storage().unsafeGetStorageImpl() && !(behind == nullptr && both_empty)) {
    if (behind == nullptr && is_alias_storage_impl(alias_storage.unsafeGetStorageImpl())) {
      // The kernel grew our alias (the call's other aliases over the same flagos storage share
      // it): move the new memory into the caller's storage, which every view of it shares, as
      // a native resize would.
      auto* storage = dst->storage().unsafeGetStorageImpl();
      const size_t nbytes = alias_storage.nbytes();
      storage->set_data_ptr_noswap(
          accelerator().adopt_native(
              take_native_memory(alias_storage), nbytes, original.device().index()));
      storage->set_nbytes(nbytes);
    } else {
      // The kernel pointed the tensor at other memory (set_ and friends).
      StorageRelabeler relabeler(original.device().index());
      dst->set_storage_keep_dtype(relabeler.to_flagos(alias_storage));
    }
  }
  if (dst->sizes() != src->sizes() || dst->strides() != src->strides() ||
      dst->storage_offset() != src->storage_offset()) {
    dst->set_sizes_and_strides(src->sizes(), src->strides(), src->storage_offset());
  }
  // Some kernels finish by flipping a math bit of their out= tensor (CPU's lu_solve with
  // left=False conjugates its result lazily, CUDA's svd its Vh).
  if (C10_UNLIKELY(dst->is_conj() != src->is_conj() || dst->is_neg() != src->is_neg())) {
    dst->_set_conj(src->is_conj());
    dst->_set_neg(src->is_neg());
  }
}

} // namespace torch_fl
