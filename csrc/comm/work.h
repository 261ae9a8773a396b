#pragma once

// The work objects ProcessGroupFlagOS hands back, and what they carry: the flagos tensors a
// collective reports, the native aliases its inner backend was given, and what remains to do
// once the inner work completes (host-staged outputs, emulated reduce ops).

#include "comm/process_group_flagos.h"

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/SmallVector.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch_fl::comm {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

inline bool is_flagos(const at::Tensor& t) {
  return t.defined() && t.device().type() == kFlagos;
}

// Where a work came from, formatted only when an error needs it.
struct WorkContext {
  const char* op;
  const char* tier; // interned: see interned_name
  TensorPath path;
  int rank;
  int size;

  std::string str() const;
};

// Works outlive their group and read its tier's name only for messages: they point at one
// process-wide copy rather than copy the string on every call. Never shrinks (a few names).
const char* interned_name(const std::string& name);

// What remains to do once the inner work has completed (host-staged outputs, AVG emulation).
// Shared by the work and by the callback of its future, so whichever observes completion first
// does it, once. Zero-copy calls have nothing to finish and allocate none.
struct Completion {
  std::mutex mutex;
  bool done = false;
  // (flagos destination, inner source): staged outputs copied back to flagos memory.
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_backs;
  // Inner outputs divided by `divisor` before the copy-back (ReduceOp.AVG emulation).
  std::vector<at::Tensor> divide;
  int64_t divisor = 1;

  // Host-synchronous: when it returns, the flagos outputs hold the result.
  void finalize();
};

// Finalizes `completion` when `inner` completes, on whichever thread completes it (or at
// wait(), whichever comes first): a collective whose work is never waited on (async_op=True,
// the handle dropped, ranks synchronised by a barrier) leaves its result in the flagos tensors,
// as a gloo or NCCL work on native tensors does.
void finalize_when_complete(c10d::Work& inner, const std::shared_ptr<Completion>& completion);

// The native aliases a zero-copy call handed the inner backend.
using Aliases = c10::SmallVector<at::Tensor, 2>;

// The flagos tensors a work reports (Work::result() and its future's value): usually one.
//
// A zero-copy result is held weakly, with the index of its native alias: the alias (which the
// work and the inner backend's work keep) holds the memory. A strong reference would hold the
// caller's tensor past the Python call, and the work is destroyed without the GIL, so letting
// go of the tensor's Python object would take the GIL once per collective. result() returns the
// caller's tensor while it lives, and afterwards a flagos tensor over the same storage.
class Results {
 public:
  Results() = default;
  explicit Results(c10::ArrayRef<at::Tensor> strong) {
    for (const auto& t : strong) {
      add(t);
    }
  }
  void add(const at::Tensor& t) {
    entries_.push_back(Entry{t, std::nullopt, 0, t.device().index()});
  }
  void add_zero_copy(const at::Tensor& t, size_t alias) {
    entries_.push_back(Entry{{}, Weak(t.getIntrusivePtr()), alias, t.device().index()});
  }
  std::vector<at::Tensor> get(const Aliases& aliases) const;

 private:
  using Weak = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Entry {
    at::Tensor strong;
    std::optional<Weak> weak;
    size_t alias;
    c10::DeviceIndex index;
  };
  c10::SmallVector<Entry, 2> entries_;
};

// The work of one collective: the inner backend's work, reporting the flagos tensors.
class FLAGOS_API FlagOSWork final : public c10d::Work {
 public:
  FlagOSWork(
      int rank,
      c10d::OpType type,
      c10::intrusive_ptr<c10d::Work> inner,
      Results&& results,
      std::shared_ptr<Completion> completion,
      WorkContext context,
      Aliases&& aliases = {})
      : c10d::Work(rank, type),
        inner_(std::move(inner)),
        results_(std::move(results)),
        aliases_(std::move(aliases)),
        completion_(std::move(completion)),
        context_(context) {}
  ~FlagOSWork() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void abort() override;
  float getDuration() const override;
  uint64_t getSequencenumber() const override;
  // A future over the flagos results, on the flagos devices: waiting on it (or chaining with
  // then()) orders the current flagos streams after the collective, as CUDA futures do.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  // Runs f, naming this work in any error it raises.
  template <typename F>
  void with_context(F&& f);

  c10::intrusive_ptr<c10d::Work> inner_;
  Results results_;
  Aliases aliases_;
  std::shared_ptr<Completion> completion_; // null when there is nothing to finish
  WorkContext context_;
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// One work over the works issued between startCoalescing() and endCoalescing() on a tier
// that does not coalesce natively.
class FLAGOS_API GroupWork final : public c10d::Work {
 public:
  GroupWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works)
      : c10d::Work(rank, c10d::OpType::COALESCED), works_(std::move(works)) {}

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

} // namespace torch_fl::comm
