#include "comm/call.h"

#include "aten/alias.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/scalar_tensor.h>
#include <c10/util/Exception.h>

namespace torch_fl::comm {

void Call::check(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), context(), ": ", what, " is an undefined tensor");
  TORCH_CHECK(
      is_flagos(t),
      context(),
      ": ",
      what,
      " is on ",
      t.device(),
      "; this backend takes flagos tensors. To run collectives on cpu tensors too, initialise "
      "the group with backend=\"cpu:gloo,flagos:flagos\".");
  TORCH_CHECK(
      t.layout() == c10::kStrided,
      context(),
      ": ",
      what,
      " has layout ",
      t.layout(),
      "; only strided tensors are supported");
  TORCH_CHECK(
      t.is_contiguous(t.suggest_memory_format()),
      context(),
      ": ",
      what,
      " is not contiguous (sizes ",
      t.sizes(),
      ", strides ",
      t.strides(),
      "); call .contiguous() first");
  if (!device_) {
    device_ = t.device();
    const auto bound = pg_.getBoundDeviceId();
    TORCH_CHECK(
        !bound || bound->type() != kFlagos || bound->index() == t.device().index(),
        context(),
        ": ",
        what,
        " is on ",
        t.device(),
        " but this rank was bound to ",
        *bound,
        " by init_process_group(device_id=...)");
  } else {
    TORCH_CHECK(
        t.device() == *device_,
        context(),
        ": ",
        what,
        " is on ",
        t.device(),
        " while another tensor of the same call "
        "is on ",
        *device_,
        "; one rank drives one device, so all tensors must be on it");
  }
}

void Call::check_dtype(const at::Tensor& t, const at::Tensor& ref, const char* what) {
  TORCH_CHECK(
      t.scalar_type() == ref.scalar_type(),
      context(),
      ": ",
      what,
      " has dtype ",
      t.scalar_type(),
      " but the input has dtype ",
      ref.scalar_type(),
      "; they must match");
}

void Call::check_numel(int64_t got, int64_t want, const char* what) {
  TORCH_CHECK(got == want, context(), ": ", what, " has ", got, " elements, expected ", want);
}

void Call::check_coalesced_pairs(
    const std::vector<at::Tensor>& outputs,
    const std::vector<at::Tensor>& inputs,
    bool outputs_are_larger) {
  TORCH_CHECK(
      outputs.size() == inputs.size(),
      context(),
      ": ",
      outputs.size(),
      " outputs for ",
      inputs.size(),
      " inputs");
  const int64_t world = pg_.getSize();
  for (size_t i = 0; i < outputs.size(); ++i) {
    check(outputs[i], "output");
    check_dtype(outputs[i], inputs[i], "an output");
    if (outputs_are_larger) {
      check_numel(outputs[i].numel(), inputs[i].numel() * world, "an output");
    } else {
      check_numel(inputs[i].numel(), outputs[i].numel() * world, "an input");
    }
  }
}

at::Tensor Call::in(const at::Tensor& t, const char* what) {
  check(t, what);
  return pg_.path_ == TensorPath::ZeroCopy ? zero_copy(t) : staged_copy(t);
}

at::Tensor Call::out(const at::Tensor& t, const char* what) {
  return written(t, what, /*reads=*/false);
}

at::Tensor Call::inout(const at::Tensor& t, const char* what) {
  return written(t, what, /*reads=*/true);
}

at::Tensor Call::written(const at::Tensor& t, const char* what, bool reads) {
  check(t, what);
  if (pg_.path_ == TensorPath::ZeroCopy) {
    return zero_copy_result(t);
  }
  results_.add(t);
  at::Tensor staged;
  if (reads) {
    staged = staged_copy(t);
  } else {
    auto alias = native_alias(t);
    staged = at::empty_like(alias, alias.options().device(c10::kCPU));
  }
  completion().copy_backs.emplace_back(t, staged);
  return staged;
}

at::Tensor Call::in_result(const at::Tensor& t, const char* what) {
  if (pg_.path_ == TensorPath::ZeroCopy) {
    check(t, what);
    return zero_copy_result(t);
  }
  auto inner = in(t, what);
  results_.add(t);
  return inner;
}

std::vector<at::Tensor> Call::each(
    const std::vector<at::Tensor>& ts,
    const char* what,
    at::Tensor (Call::*one)(const at::Tensor&, const char*)) {
  std::vector<at::Tensor> inner;
  inner.reserve(ts.size());
  for (const auto& t : ts) {
    inner.push_back((this->*one)(t, what));
  }
  return inner;
}

std::vector<at::Tensor> Call::in(const std::vector<at::Tensor>& ts, const char* what) {
  return each(ts, what, &Call::in);
}

std::vector<at::Tensor> Call::out(const std::vector<at::Tensor>& ts, const char* what) {
  return each(ts, what, &Call::out);
}

std::vector<at::Tensor> Call::inout(const std::vector<at::Tensor>& ts, const char* what) {
  return each(ts, what, &Call::inout);
}

c10d::ReduceOp Call::reduce_op(
    const c10d::ReduceOp& op,
    c10::ArrayRef<at::Tensor*> inputs,
    const std::vector<at::Tensor>& outputs,
    bool in_place) {
  if (op.op_ == c10d::ReduceOp::PREMUL_SUM) {
    auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
    TORCH_CHECK(supplement, context(), ": PREMUL_SUM without a scaling factor");
    if (pg_.tier_ == "nccl") {
      if (is_flagos(supplement->tensor_factor)) {
        c10d::ReduceOp mapped = op;
        mapped.supplement_ = c10::make_intrusive<c10d::NCCLPreMulSumSupplement>(
            native_alias(supplement->tensor_factor));
        return mapped;
      }
      return op;
    }
    // As NCCL's: an integer tensor cannot be scaled by a real factor; checked before any
    // input is scaled, so a refused call changes nothing.
    for (const auto* t : inputs) {
      TORCH_CHECK_TYPE(
          at::isFloatingType(t->scalar_type()),
          context(),
          ": PREMUL_SUM takes floating-point tensors (half, bfloat16, float or double), as "
          "NCCL's does; got ",
          t->scalar_type());
    }
    at::Tensor factor = supplement->tensor_factor;
    if (is_flagos(factor)) {
      factor = native_alias(factor);
    }
    const bool may_scale_in_place = in_place || pg_.path_ == TensorPath::HostStaged;
    for (auto* t : inputs) {
      at::Tensor f =
          factor.defined()
              ? factor.to(t->device())
              : at::scalar_tensor(supplement->double_factor, t->options().dtype(at::kDouble));
      if (may_scale_in_place) {
        t->mul_(f);
      } else {
        *t = t->mul(f).to(t->scalar_type());
      }
    }
    return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
  if (op.op_ == c10d::ReduceOp::AVG) {
    // As NCCL's (and before anything runs: the SUM would change the data, then the division
    // could not write back into a bool tensor).
    for (const auto* t : inputs) {
      TORCH_CHECK_TYPE(
          t->scalar_type() != at::kBool,
          context(),
          ": Cannot use ReduceOp.AVG with boolean inputs");
    }
  }
  if (op.op_ == c10d::ReduceOp::AVG && pg_.tier_ != "nccl") {
    for (const auto& t : outputs) {
      completion().divide.push_back(t);
    }
    return c10d::ReduceOp(c10d::ReduceOp::SUM);
  }
  return op;
}

c10::intrusive_ptr<c10d::Work> Call::finish(
    c10::intrusive_ptr<c10d::Work> inner, c10d::OpType type) {
  if (pg_.coalescing_) {
    for (auto& t : results_.get(aliases_)) {
      pg_.coalesced_results_.push_back(std::move(t));
    }
  }
  if (!inner) {
    return inner;
  }
  if (completion_) {
    finalize_when_complete(*inner, completion_);
  }
  c10::intrusive_ptr<c10d::Work> work = c10::make_intrusive<FlagOSWork>(
      pg_.getRank(),
      type,
      std::move(inner),
      std::move(results_),
      std::move(completion_),
      work_context(),
      std::move(aliases_));
  if (pg_.coalescing_ && !pg_.native_coalescing_) {
    pg_.coalesced_works_.push_back(work);
  }
  return work;
}

at::Tensor Call::zero_copy(const at::Tensor& t) {
  return aliases_.emplace_back(native_alias(t));
}

at::Tensor Call::zero_copy_result(const at::Tensor& t) {
  at::Tensor alias = zero_copy(t);
  results_.add_zero_copy(t, aliases_.size() - 1);
  return alias;
}

at::Tensor Call::staged_copy(const at::Tensor& t) {
  auto alias = native_alias(t);
  auto staged = at::empty_like(alias, alias.options().device(c10::kCPU));
  staged.copy_(alias); // synchronous: ordered after the work queued on the current stream
  return staged;
}

Completion& Call::completion() {
  if (!completion_) {
    completion_ = std::make_shared<Completion>();
    completion_->divisor = pg_.getSize();
  }
  return *completion_;
}

} // namespace torch_fl::comm
