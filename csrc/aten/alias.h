#pragma once

#include "macros.h"

// Zero-copy re-labelling between flagos tensors and native (CPU or CUDA) tensors.
//
// A native alias is a *new* TensorImpl over the flagos memory, typed as the native device; the
// caller's tensor is never modified while a kernel runs. Results are re-labelled the other way:
// a native result that aliases a flagos input maps back to the flagos storage it came from
// (views keep storage identity), and fresh native memory is adopted into a flagos storage.

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>

#include <optional>

namespace torch_fl {

// A native-typed tensor over the memory of a flagos tensor. When `resizable`, a kernel may
// grow it (out= results); sync_from_alias() then carries the growth back.
FLAGOS_API at::Tensor native_alias(const at::Tensor& flagos, bool resizable = false);
// The alias torch_fl.native_view hands out, which may outlive any call: while it lives the
// flagos storage does not resize (that would free the memory under it); neither does the alias.
FLAGOS_API at::Tensor pinned_native_alias(const at::Tensor& flagos);

// Hands an alias back when its call is done. If nothing else refers to it, it is emptied (its
// reference on the flagos memory dropped) and kept for this thread's next native_alias;
// otherwise nothing happens and the alias is freed as usual when its holders let go.
FLAGOS_API void release_alias(at::Tensor& alias) noexcept;

// For callers that keep their own aliases between calls (the flagos_python route keeps them
// with their Python objects). empty_alias_for_reuse: when nothing but its owner (`pyobject`, or
// null for a C++ owner) refers to an alias made by native_alias and no kernel changed what a
// fresh alias would not have, drops its reference on the flagos memory and returns true; else
// changes nothing. repoint_native_alias: points such an emptied alias at `flagos` (read-only);
// false, changing nothing, when it belongs to another native device or inference mode.
FLAGOS_API bool empty_alias_for_reuse(const at::Tensor& alias, const void* pyobject) noexcept;
FLAGOS_API bool repoint_native_alias(const at::Tensor& alias, const at::Tensor& flagos);

// Native kernels find overlapping arguments by storage identity (at::get_overlap_status
// compares storages with Storage::is_alias_of), but every alias has a StorageImpl of its own.
// For a call that writes an argument, the caller adds each argument's alias; apply() then gives
// the aliases of arguments over one flagos storage one alias storage (a written argument's, which
// the kernel may resize), so a kernel refuses a partial overlap and handles an exact one as it
// does on the native device. TensorIterator also tells an output that is an input by tensor
// identity (it may not be resized then): an argument added with add_replaceable that passes the
// same flagos tensor as a written one gets that argument's alias in its place. Holds no
// references: the caller keeps the flagos tensors and the aliases alive.
class FLAGOS_API SharedAliasStorage {
 public:
  void add(const at::Tensor& flagos, const at::Tensor& alias, bool written);
  // `alias` is the tensor the kernel will be handed, which apply() may replace.
  void add_replaceable(const at::Tensor& flagos, at::Tensor& alias, bool written);
  // A read-only element of a Tensor[] argument (`torch.cat([x, y], out=x)`), at `index` of the
  // list `list` holds, which apply() may replace there.
  void add_list_element(const at::Tensor& flagos, c10::IValue& list, size_t index);
  void apply();

 private:
  struct Entry {
    c10::StorageImpl* flagos;
    const c10::TensorImpl* flagos_tensor;
    c10::TensorImpl* alias;
    at::Tensor* holder; // where the kernel's argument lives; null: not replaceable
    bool written;
    c10::IValue* list = nullptr; // or the list holding it, at list_index
    size_t list_index = 0;
  };
  void add_entry(
      const at::Tensor& flagos, const at::Tensor& alias, at::Tensor* holder, bool written);
  void hand_written_aliases_to_their_inputs();
  c10::SmallVector<Entry, 6> entries_;
};

// Maps native storages to flagos storages within one operator call, so two results that shared
// a native storage share one flagos storage too.
class FLAGOS_API StorageRelabeler {
 public:
  // A kernel's fresh results may be taken over (their memory moves to flagos); a tensor the
  // caller still holds must only be shared.
  enum class Ownership { TakeOverFresh, Share };

  explicit StorageRelabeler(c10::DeviceIndex index, Ownership ownership = Ownership::TakeOverFresh)
      : index_(index), ownership_(ownership) {}
  // `may_take_over` false: the memory is shared even under TakeOverFresh (the tensor holding
  // `native` is still referenced elsewhere, so its memory must stay where it is).
  c10::Storage to_flagos(const c10::Storage& native, bool may_take_over = true);

 private:
  c10::DeviceIndex index_;
  Ownership ownership_;
  c10::SmallVector<std::pair<c10::StorageImpl*, c10::Storage>, 2> seen_;
};

// A flagos tensor with the metadata of a native result (zero copy).
FLAGOS_API at::Tensor flagos_from_native(const at::Tensor& native, StorageRelabeler& relabeler);
FLAGOS_API at::Tensor flagos_from_native(const at::Tensor& native, c10::DeviceIndex index);
// A flagos view of a native tensor the caller keeps using: memory is shared, never taken over.
FLAGOS_API at::Tensor flagos_view_of_native(const at::Tensor& native, c10::DeviceIndex index);

// Turns a fresh native result into a flagos tensor without allocating: when nothing else
// references the tensor or its storage (and the storage is not an alias of flagos memory), the
// same TensorImpl and StorageImpl are re-labelled as flagos:index. Returns false (and changes
// nothing) otherwise; then flagos_from_native is the way. `owners` is how many references to
// the tensor the caller accounts for: `native` itself, plus any it vouches nobody else can
// reach (the Python object of a result only the caller holds).
FLAGOS_API bool relabel_fresh_in_place(
    at::Tensor& native, c10::DeviceIndex index, size_t owners = 1);

// Re-labels the results of one operator call as flagos:index tensors: undefined tensors and
// tensors not on the native device pass through; a fresh result is re-labelled in place when
// `in_place` allows it and nothing else references it; any other becomes a flagos tensor over
// the same memory, results that shared a native storage sharing one flagos storage.
class FLAGOS_API ResultRelabeler {
 public:
  ResultRelabeler(c10::DeviceIndex index, c10::DeviceType native_type, bool in_place = true)
      : index_(index), native_type_(native_type), in_place_(in_place) {}
  at::Tensor operator()(at::Tensor t);

 private:
  c10::DeviceIndex index_;
  c10::DeviceType native_type_;
  bool in_place_;
  std::optional<StorageRelabeler> relabeler_;
};

// After a kernel wrote through `alias` (maybe resizing or re-pointing it), makes `original`
// describe the same memory and shape.
FLAGOS_API void sync_from_alias(const at::Tensor& original, const at::Tensor& alias);

// True when the storage is a native alias created by native_alias().
FLAGOS_API bool is_native_alias_storage(const c10::Storage& storage);

} // namespace torch_fl
