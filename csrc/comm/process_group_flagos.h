#pragma once

#include "macros.h"

// ProcessGroupFlagOS: the c10d backend for flagos tensors.
//
// It wraps an inner c10d backend that the installed torch provides (gloo, or NCCL on CUDA-ABI
// accelerators; Python picks it, see torch_fl/comm/process_group.py) and hands it the flagos
// tensors either
//   - zero copy: native-typed aliases over the flagos memory (CPU tensors on the cpu
//     accelerator, CUDA tensors on the cuda accelerator), or
//   - host staged: CPU copies of the inputs, with the outputs copied back to the flagos tensors
//     when the work completes (gloo on a device accelerator).
// Work objects report the flagos tensors as results; their futures are flagos-device futures,
// so waiting on one orders the waiter's current flagos stream after the collective.

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace torch_fl::comm {

enum class TensorPath : uint8_t { ZeroCopy = 0, HostStaged = 1 };

FLAGOS_API const char* tensor_path_name(TensorPath path);

class FLAGOS_API ProcessGroupFlagOS : public c10d::Backend {
 public:
  // What split_group copies from a group and hands back to split(): torch's own fields only
  // (timeout, name), because a part is created the way its parent was, whatever the tier.
  struct FLAGOS_API Options : c10d::Backend::Options {
    explicit Options(std::chrono::milliseconds timeout)
        : c10d::Backend::Options("flagos", timeout) {}
  };

  // One part of a split, as this rank's member of it will be created.
  struct SplitPart {
    c10::intrusive_ptr<c10d::Store> store; // where the part's members meet
    int rank;
    int size;
    std::chrono::milliseconds timeout;
    std::string group_name;
    std::vector<uint64_t> global_ranks;
  };
  // Creates a part with the parent's tier and path (set by the Python bindings: the tiers'
  // inner backends are built in torch_fl/comm/process_group.py).
  using PartFactory = std::function<c10::intrusive_ptr<c10d::Backend>(
      const ProcessGroupFlagOS& parent, const SplitPart& part)>;
  static void set_part_factory(PartFactory factory);

  // `tier` names the inner backend's tier ("nccl", "gloo", ...) for messages and inspection.
  ProcessGroupFlagOS(c10::intrusive_ptr<c10d::Backend> inner, std::string tier, TensorPath path);
  ~ProcessGroupFlagOS() override;

  const std::string getBackendName() const override {
    return "flagos";
  }
  const std::string& tier() const {
    return tier_;
  }
  TensorPath path() const {
    return path_;
  }
  const c10::intrusive_ptr<c10d::Backend>& inner() const {
    return inner_;
  }

  // How the tier was chosen, recorded by the Python factory for inspection: tiers ranked above
  // the chosen one that were candidates but could not be used (skip reasons), tiers whose
  // prerequisites are absent here (unavailable), and the tier asked for (empty: none).
  using Reasons = std::map<std::string, std::string>;
  void set_selection(
      std::string profile, Reasons skip_reasons, Reasons unavailable, std::string requested) {
    profile_ = std::move(profile);
    skip_reasons_ = std::move(skip_reasons);
    unavailable_ = std::move(unavailable);
    requested_ = std::move(requested);
  }
  const std::string& requested() const {
    return requested_;
  }
  const std::string& profile() const {
    return profile_;
  }
  const Reasons& skip_reasons() const {
    return skip_reasons_;
  }
  const Reasons& unavailable() const {
    return unavailable_;
  }

  // The group's store, global ranks (empty for the default group: all of them) and timeout,
  // recorded by the Python factory; split parts are created from them.
  void set_group(
      c10::intrusive_ptr<c10d::Store> store,
      std::vector<uint64_t> global_ranks,
      std::chrono::milliseconds timeout) {
    store_ = std::move(store);
    global_ranks_ = std::move(global_ranks);
    timeout_ = timeout;
  }

  // Splitting: dist.split_group, and the sub-groups of a DeviceMesh of two or more dimensions
  // once init_process_group(device_id=...) bound the default group. Each part is created
  // afresh with this group's tier and path, as dist.new_group would create it (not with the
  // inner backend's split, e.g. ncclCommSplit): every tier can do that, and ranks left out of
  // a new_group then have nothing to take part in.
  bool supportsSplitting() const override {
    return true;
  }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::vector<int>& ranks,
      const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;

  bool supportsCoalescing() const override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  void setTimeout(std::chrono::milliseconds timeout) override;
  void setGroupUid(const std::string& pg_uid) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output,
      at::Tensor& input,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output,
      at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output,
      at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(
      std::vector<at::Tensor>& tensors, int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(
      std::vector<at::Tensor>& tensors, int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

 private:
  friend class Call;

  // Passes a device bound with init_process_group(device_id=...) on to the inner backend.
  void bind_inner_device();

  c10::intrusive_ptr<c10d::Backend> inner_;
  std::string tier_;
  const char* tier_name_; // tier_, interned for works (see interned_name)
  TensorPath path_;
  std::string profile_;
  Reasons skip_reasons_;
  Reasons unavailable_;
  std::string requested_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::vector<uint64_t> global_ranks_;
  std::atomic<uint64_t> splits_{0};
  std::chrono::milliseconds timeout_ =
      std::chrono::minutes(30); // torch's default; set_group sets it
  // Between startCoalescing() and endCoalescing(): NCCL coalesces natively; for the other
  // tiers the works issued meanwhile are collected and endCoalescing() returns one work over
  // all of them.
  bool coalescing_ = false;
  bool native_coalescing_ = false;
  std::vector<at::Tensor> coalesced_results_;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_works_;
};

} // namespace torch_fl::comm
