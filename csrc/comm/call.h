#pragma once

// One collective call of ProcessGroupFlagOS: validates the flagos arguments, maps them to what
// the inner backend takes (zero-copy native aliases, or host-staged copies), emulates the reduce
// ops the inner backend lacks, and wraps the inner work.

#include "comm/process_group_flagos.h"
#include "comm/work.h"

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace torch_fl::comm {

class Call {
 public:
  Call(ProcessGroupFlagOS& pg, const char* op) : pg_(pg), op_(op) {
    pg_.bind_inner_device();
  }

  WorkContext work_context() const {
    return WorkContext{op_, pg_.tier_name_, pg_.path_, pg_.getRank(), pg_.getSize()};
  }
  std::string context() const {
    return work_context().str();
  }

  // Argument checks; each error names the call, its tier and what to change.
  void check(const at::Tensor& t, const char* what);
  void check_dtype(const at::Tensor& t, const at::Tensor& ref, const char* what);
  void check_numel(int64_t got, int64_t want, const char* what);
  // Coalesced tensor collectives pair output i with input i; one side holds world-size times the
  // elements of the other (gathering: the outputs; scattering: the inputs).
  void check_coalesced_pairs(
      const std::vector<at::Tensor>& outputs,
      const std::vector<at::Tensor>& inputs,
      bool outputs_are_larger);

  // A flagos tensor the collective reads.
  at::Tensor in(const at::Tensor& t, const char* what = "input");
  // A flagos tensor the collective writes without reading it.
  at::Tensor out(const at::Tensor& t, const char* what = "output");
  // A flagos tensor the collective reads and writes.
  at::Tensor inout(const at::Tensor& t, const char* what = "tensor");
  // A flagos tensor the collective reads and reports as its result (a broadcast root).
  at::Tensor in_result(const at::Tensor& t, const char* what = "tensor");
  std::vector<at::Tensor> in(const std::vector<at::Tensor>& ts, const char* what = "input");
  std::vector<at::Tensor> out(const std::vector<at::Tensor>& ts, const char* what = "output");
  std::vector<at::Tensor> inout(const std::vector<at::Tensor>& ts, const char* what = "tensor");

  // The reduce op to hand the inner backend. NCCL runs every op itself; for the others AVG
  // becomes SUM followed by a division, and PREMUL_SUM a multiplication followed by SUM.
  // `inputs` are the inner input tensors (replaced when scaled); `outputs` the inner outputs;
  // `in_place` says the inputs are the outputs (all_reduce), so scaling them in place is fine.
  c10d::ReduceOp reduce_op(
      const c10d::ReduceOp& op,
      c10::ArrayRef<at::Tensor*> inputs,
      const std::vector<at::Tensor>& outputs,
      bool in_place);

  // The work to return: the inner one wrapped (collected too while the group coalesces).
  c10::intrusive_ptr<c10d::Work> finish(c10::intrusive_ptr<c10d::Work> inner, c10d::OpType type);

 private:
  // `one` applied to each tensor of a list argument.
  std::vector<at::Tensor> each(
      const std::vector<at::Tensor>& ts,
      const char* what,
      at::Tensor (Call::*one)(const at::Tensor&, const char*));
  // A tensor the collective writes (and reads first when `reads`): its alias, or a host copy
  // that is copied back once the work completes.
  at::Tensor written(const at::Tensor& t, const char* what, bool reads);
  at::Tensor zero_copy(const at::Tensor& t);
  at::Tensor zero_copy_result(const at::Tensor& t);
  at::Tensor staged_copy(const at::Tensor& t);
  Completion& completion();

  ProcessGroupFlagOS& pg_;
  const char* op_;
  Results results_;
  Aliases aliases_;
  std::shared_ptr<Completion> completion_; // made by the first output that needs finishing
  std::optional<c10::Device> device_;
};

} // namespace torch_fl::comm
