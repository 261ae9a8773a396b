#include "comm/process_group_flagos.h"

#include "comm/call.h"
#include "comm/work.h"
#include "runtime/accelerator.h"
#include "runtime/fork_safe_mutex.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <utility>
#include <vector>

namespace torch_fl::comm {
namespace {

// all_gather_into_tensor's and reduce_scatter_tensor's world-sized tensor may have any shape of
// the right size (nn.SyncBatchNorm gathers a [n] tensor into a [1, world * n] one), but gloo
// splits it along dimension 0: the inner backend gets the standard layout, [world * d0, d1, ...]
// over the same memory (contiguous, as the checks require), and a 0-dim one-rank tensor as [1].
at::Tensor as_rank_block(const at::Tensor& rank_tensor) {
  return rank_tensor.dim() == 0 ? rank_tensor.view({1}) : rank_tensor;
}

at::Tensor as_world_blocks(
    const at::Tensor& world_tensor, const at::Tensor& rank_tensor, int world) {
  std::vector<int64_t> shape = as_rank_block(rank_tensor).sizes().vec();
  shape[0] *= world;
  return world_tensor.view(shape);
}

ForkSafeMutex& part_factory_mutex =
    *new ForkSafeMutex(); // never destroyed: groups may split at exit
ProcessGroupFlagOS::PartFactory& part_factory() {
  static ProcessGroupFlagOS::PartFactory factory;
  return factory;
}

} // namespace

void ProcessGroupFlagOS::set_part_factory(PartFactory factory) {
  std::lock_guard lock(part_factory_mutex);
  part_factory() = std::move(factory);
}

ProcessGroupFlagOS::ProcessGroupFlagOS(
    c10::intrusive_ptr<c10d::Backend> inner, std::string tier, TensorPath path)
    : c10d::Backend(inner ? inner->getRank() : -1, inner ? inner->getSize() : -1),
      inner_(std::move(inner)),
      tier_(std::move(tier)),
      tier_name_(interned_name(tier_)),
      path_(path) {
  TORCH_CHECK(inner_, "ProcessGroupFlagOS needs an inner backend");
  TORCH_CHECK(
      !(tier_ == "nccl" && path_ == TensorPath::HostStaged),
      "ProcessGroupFlagOS: the nccl tier takes flagos tensors zero copy, not host staged");
  TORCH_CHECK(
      !(tier_ == "nccl" && accelerator().native_device_type() != c10::DeviceType::CUDA),
      "ProcessGroupFlagOS: the nccl tier needs a CUDA-ABI accelerator; this build's accelerator "
      "is ",
      accelerator().name());
  init();
}

ProcessGroupFlagOS::~ProcessGroupFlagOS() = default;

void ProcessGroupFlagOS::bind_inner_device() {
  const auto bound = getBoundDeviceId();
  if (bound && bound->type() == kFlagos && !inner_->getBoundDeviceId()) {
    const auto native = accelerator().native_device(bound->index());
    if (native.has_index()) { // cpu (the cpu accelerator's native device) has none
      inner_->setBoundDeviceId(native);
    }
  }
}

bool ProcessGroupFlagOS::supportsCoalescing() const {
  // Staged outputs are copied back per work; coalesced works would need them merged.
  return path_ == TensorPath::ZeroCopy && tier_ == "nccl" && inner_->supportsCoalescing();
}

void ProcessGroupFlagOS::startCoalescing() {
  TORCH_CHECK(
      !coalescing_,
      "ProcessGroupFlagOS (tier ",
      tier_,
      "): startCoalescing while already coalescing");
  native_coalescing_ = supportsCoalescing();
  if (native_coalescing_) {
    inner_->startCoalescing();
  }
  coalescing_ = true;
  coalesced_results_.clear();
  coalesced_works_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::endCoalescing() {
  TORCH_CHECK(
      coalescing_, "ProcessGroupFlagOS (tier ", tier_, "): endCoalescing without startCoalescing");
  coalescing_ = false;
  auto results = std::move(coalesced_results_);
  auto works = std::move(coalesced_works_);
  coalesced_results_.clear();
  coalesced_works_.clear();
  if (!native_coalescing_) {
    return c10::make_intrusive<GroupWork>(getRank(), std::move(works));
  }
  auto inner = inner_->endCoalescing();
  if (!inner) {
    return inner;
  }
  return c10::make_intrusive<FlagOSWork>(
      getRank(),
      c10d::OpType::COALESCED,
      std::move(inner),
      Results(results),
      nullptr,
      WorkContext{"coalesced collectives", tier_name_, path_, getRank(), getSize()});
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupFlagOS::getBackendOptions() {
  auto options = c10::make_intrusive<Options>(timeout_);
  options->group_name = getGroupUid();
  options->global_ranks_in_group = global_ranks_;
  return options;
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupFlagOS::split(
    const c10::intrusive_ptr<c10d::Store>& store,
    const std::vector<int>& ranks,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  // The members of a part meet under a prefix of this group's own store that they all agree
  // on. The store torch passes is prefixed with the new group's name, which torch derives from
  // how many groups a rank knows: ranks left out of an earlier new_group compute another name.
  // Every rank of this group takes part in every split (split_group requires it), so the count
  // of splits is the same in all of them.
  const uint64_t split = splits_++;
  std::string prefix = c10::str("flagos_split/", split, "/");
  for (const int r : ranks) {
    prefix += c10::str(r, ",");
  }
  SplitPart part{
      c10::make_intrusive<c10d::PrefixStore>(prefix, store_ ? store_ : store),
      -1,
      static_cast<int>(ranks.size()),
      timeout_,
      getGroupUid(),
      {}};
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    TORCH_CHECK(
        r >= 0 && r < getSize(),
        "ProcessGroupFlagOS (tier ",
        tier_,
        "): cannot split rank ",
        r,
        " off a group of ",
        getSize(),
        " ranks; split_ranks take the parent group's ranks, 0 to ",
        getSize() - 1);
    if (r == getRank()) {
      part.rank = static_cast<int>(i);
    }
    part.global_ranks.push_back(global_ranks_.empty() ? r : global_ranks_.at(r));
  }
  if (part.rank < 0) { // this rank is in none of the parts
    return nullptr;
  }
  if (opts) { // split_group's copy of getBackendOptions(), or any backend's options
    part.timeout = opts->timeout;
    part.group_name = opts->group_name;
  }
  PartFactory factory;
  {
    std::lock_guard lock(part_factory_mutex);
    factory = part_factory();
  }
  TORCH_CHECK(
      factory,
      "ProcessGroupFlagOS: splitting needs torch_fl's Python bindings (import torch_fl.comm)");
  auto created = factory(*this, part);
  if (const auto bound = getBoundDeviceId()) {
    created->setBoundDeviceId(bound);
  }
  return created;
}

void ProcessGroupFlagOS::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  inner_->setTimeout(timeout);
}

void ProcessGroupFlagOS::setGroupUid(const std::string& pg_uid) {
  c10d::Backend::setGroupUid(pg_uid);
  inner_->setGroupUid(pg_uid);
}

void ProcessGroupFlagOS::setSequenceNumberForGroup() {
  inner_->setSequenceNumberForGroup();
}

uint64_t ProcessGroupFlagOS::getSequenceNumberForGroup() {
  return inner_->getSequenceNumberForGroup();
}

c10d::ErrorType ProcessGroupFlagOS::getError() {
  return inner_->getError();
}

void ProcessGroupFlagOS::abort() {
  inner_->abort();
}

void ProcessGroupFlagOS::shutdown() {
  inner_->shutdown();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  Call call(*this, "broadcast");
  const bool root = opts.rootRank == getRank();
  std::vector<at::Tensor> inner;
  for (const auto& t : tensors) {
    inner.push_back(root ? call.in_result(t) : call.inout(t));
  }
  return call.finish(inner_->broadcast(inner, opts), c10d::OpType::BROADCAST);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  Call call(*this, "all_reduce");
  auto inner = call.inout(tensors);
  c10::SmallVector<at::Tensor*, 4> inputs;
  for (auto& t : inner) {
    inputs.push_back(&t);
  }
  auto inner_opts = opts;
  inner_opts.reduceOp = call.reduce_op(opts.reduceOp, inputs, inner, /*in_place=*/true);
  return call.finish(inner_->allreduce(inner, inner_opts), c10d::OpType::ALLREDUCE);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Call call(*this, "all_reduce_coalesced");
  auto inner = call.inout(tensors);
  c10::SmallVector<at::Tensor*, 4> inputs;
  for (auto& t : inner) {
    inputs.push_back(&t);
  }
  auto inner_opts = opts;
  inner_opts.reduceOp = call.reduce_op(opts.reduceOp, inputs, inner, /*in_place=*/true);
  return call.finish(
      inner_->allreduce_coalesced(inner, inner_opts), c10d::OpType::ALLREDUCE_COALESCED);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  Call call(*this, "reduce");
  auto inner = call.inout(tensors);
  c10::SmallVector<at::Tensor*, 4> inputs;
  for (auto& t : inner) {
    inputs.push_back(&t);
  }
  auto inner_opts = opts;
  inner_opts.reduceOp = call.reduce_op(opts.reduceOp, inputs, inner, /*in_place=*/true);
  return call.finish(inner_->reduce(inner, inner_opts), c10d::OpType::REDUCE);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Call call(*this, "all_gather");
  auto inner_inputs = call.in(inputs);
  std::vector<std::vector<at::Tensor>> inner_outputs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (const auto& o : outputs[i]) {
      if (i < inputs.size()) {
        call.check(o, "output");
        call.check_dtype(o, inputs[i], "an output");
        call.check_numel(o.numel(), inputs[i].numel(), "an output");
      }
    }
    inner_outputs.push_back(call.out(outputs[i]));
  }
  return call.finish(inner_->allgather(inner_outputs, inner_inputs, opts), c10d::OpType::ALLGATHER);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  Call call(*this, "all_gather_into_tensor");
  auto inner_input = call.in(input);
  call.check(output, "output");
  call.check_dtype(output, input, "the output");
  call.check_numel(output.numel(), input.numel() * getSize(), "the output (world size x input)");
  auto inner_output = call.out(output);
  auto blocks = as_world_blocks(inner_output, inner_input, getSize());
  auto block = as_rank_block(inner_input);
  return call.finish(inner_->_allgather_base(blocks, block, opts), c10d::OpType::_ALLGATHER_BASE);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Call call(*this, "all_gather_coalesced");
  auto inner_inputs = call.in(inputs);
  std::vector<std::vector<at::Tensor>> inner_outputs;
  for (const auto& list : output_lists) {
    for (size_t i = 0; i < list.size() && i < inputs.size(); ++i) {
      call.check(list[i], "output");
      call.check_dtype(list[i], inputs[i], "an output");
    }
    inner_outputs.push_back(call.out(list));
  }
  return call.finish(
      inner_->allgather_coalesced(inner_outputs, inner_inputs, opts),
      c10d::OpType::ALLGATHER_COALESCED);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Call call(*this, "all_gather_into_tensor_coalesced");
  call.check_coalesced_pairs(outputs, inputs, /*outputs_are_larger=*/true);
  auto inner_inputs = call.in(inputs);
  auto inner_outputs = call.out(outputs);
  return call.finish(
      inner_->allgather_into_tensor_coalesced(inner_outputs, inner_inputs, opts),
      c10d::OpType::COALESCED);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  Call call(*this, "gather");
  auto inner_inputs = call.in(inputs);
  std::vector<std::vector<at::Tensor>> inner_outputs;
  for (const auto& list : outputs) {
    for (const auto& o : list) {
      if (!inputs.empty()) {
        call.check(o, "output");
        call.check_dtype(o, inputs[0], "an output");
      }
    }
    inner_outputs.push_back(call.out(list));
  }
  return call.finish(inner_->gather(inner_outputs, inner_inputs, opts), c10d::OpType::GATHER);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  Call call(*this, "scatter");
  auto inner_outputs = call.out(outputs);
  std::vector<std::vector<at::Tensor>> inner_inputs;
  for (const auto& list : inputs) {
    for (const auto& t : list) {
      if (!outputs.empty()) {
        call.check(t, "input");
        call.check_dtype(outputs[0], t, "the output");
      }
    }
    inner_inputs.push_back(call.in(list));
  }
  return call.finish(inner_->scatter(inner_outputs, inner_inputs, opts), c10d::OpType::SCATTER);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Call call(*this, "reduce_scatter");
  std::vector<std::vector<at::Tensor>> inner_inputs;
  std::vector<at::Tensor*> scaled;
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (const auto& t : inputs[i]) {
      if (i < outputs.size()) {
        call.check(t, "input");
        call.check_dtype(outputs[i], t, "the output");
        call.check_numel(t.numel(), outputs[i].numel(), "an input");
      }
    }
    inner_inputs.push_back(call.in(inputs[i]));
  }
  for (auto& list : inner_inputs) {
    for (auto& t : list) {
      scaled.push_back(&t);
    }
  }
  auto inner_outputs = call.out(outputs);
  auto inner_opts = opts;
  inner_opts.reduceOp = call.reduce_op(opts.reduceOp, scaled, inner_outputs, false);
  return call.finish(
      inner_->reduce_scatter(inner_outputs, inner_inputs, inner_opts),
      c10d::OpType::REDUCE_SCATTER);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  Call call(*this, "reduce_scatter_tensor");
  auto inner_input = call.in(input);
  call.check(output, "output");
  call.check_dtype(output, input, "the output");
  call.check_numel(input.numel(), output.numel() * getSize(), "the input (world size x output)");
  auto inner_output = call.out(output);
  auto inner_opts = opts;
  inner_opts.reduceOp = call.reduce_op(opts.reduceOp, {&inner_input}, {inner_output}, false);
  auto blocks = as_world_blocks(inner_input, inner_output, getSize());
  auto block = as_rank_block(inner_output);
  return call.finish(
      inner_->_reduce_scatter_base(block, blocks, inner_opts), c10d::OpType::_REDUCE_SCATTER_BASE);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Call call(*this, "reduce_scatter_tensor_coalesced");
  call.check_coalesced_pairs(outputs, inputs, /*outputs_are_larger=*/false);
  auto inner_inputs = call.in(inputs);
  auto inner_outputs = call.out(outputs);
  std::vector<at::Tensor*> scaled;
  for (auto& t : inner_inputs) {
    scaled.push_back(&t);
  }
  auto inner_opts = opts;
  inner_opts.reduceOp = call.reduce_op(opts.reduceOp, scaled, inner_outputs, false);
  return call.finish(
      inner_->reduce_scatter_tensor_coalesced(inner_outputs, inner_inputs, inner_opts),
      c10d::OpType::COALESCED); // REDUCE_SCATTER_TENSOR_COALESCED is absent before torch 2.12
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::alltoall_base(
    at::Tensor& output,
    at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes,
    const c10d::AllToAllOptions& opts) {
  Call call(*this, "all_to_all_single");
  auto inner_input = call.in(input);
  call.check(output, "output");
  call.check_dtype(output, input, "the output");
  auto inner_output = call.out(output);
  return call.finish(
      inner_->alltoall_base(inner_output, inner_input, output_split_sizes, input_split_sizes, opts),
      c10d::OpType::ALLTOALL_BASE);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::alltoall(
    std::vector<at::Tensor>& outputs,
    std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  Call call(*this, "all_to_all");
  auto inner_inputs = call.in(inputs);
  for (const auto& o : outputs) {
    call.check(o, "output");
    if (!inputs.empty()) {
      call.check_dtype(o, inputs[0], "an output");
    }
  }
  auto inner_outputs = call.out(outputs);
  return call.finish(inner_->alltoall(inner_outputs, inner_inputs, opts), c10d::OpType::ALLTOALL);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::send(
    std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  Call call(*this, "send");
  auto inner = call.in(tensors);
  return call.finish(inner_->send(inner, dst_rank, tag), c10d::OpType::SEND);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::recv(
    std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  Call call(*this, "recv");
  auto inner = call.out(tensors);
  return call.finish(inner_->recv(inner, src_rank, tag), c10d::OpType::RECV);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  Call call(*this, "recv (any source)");
  auto inner = call.out(tensors);
  return call.finish(inner_->recvAnysource(inner, tag), c10d::OpType::RECVANYSOURCE);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupFlagOS::barrier(const c10d::BarrierOptions& opts) {
  Call call(*this, "barrier");
  auto inner_opts = opts;
  if (opts.device && opts.device->type() == kFlagos) {
    inner_opts.device = accelerator().native_device(opts.device->index());
  }
  if (inner_opts.device && inner_opts.device->type() != c10::DeviceType::CUDA && tier_ == "nccl") {
    inner_opts.device.reset();
  }
  return call.finish(inner_->barrier(inner_opts), c10d::OpType::BARRIER);
}

} // namespace torch_fl::comm
