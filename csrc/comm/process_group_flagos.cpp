#include "comm/process_group_flagos.h"

#include "aten/alias.h"
#include "runtime/accelerator.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

namespace torch_fl::comm {
namespace {

constexpr auto kFlagos = c10::DeviceType::PrivateUse1;

bool is_flagos(const at::Tensor& t) {
  return t.defined() && t.device().type() == kFlagos;
}

const char* path_name(TensorPath path) {
  return path == TensorPath::ZeroCopy ? "zero_copy" : "host_staged";
}

// Works outlive their group and read its tier's name only for messages: they point at one
// process-wide copy rather than copy the string on every call. Never shrinks (a few names).
const char* interned_name(const std::string& name) {
  static std::mutex mutex;
  static auto* names = new std::set<std::string>(); // leaked: works may die after exit hooks
  std::lock_guard<std::mutex> lock(mutex);
  return names->insert(name).first->c_str();
}

// Where a work came from, formatted only when an error needs it.
struct WorkContext {
  const char* op;
  const char* tier; // interned: see interned_name
  TensorPath path;
  int rank;
  int size;

  std::string str() const {
    return c10::str(
        "ProcessGroupFlagOS ",
        op,
        " (tier ",
        tier,
        ", ",
        path_name(path),
        ", rank ",
        rank,
        " of ",
        size,
        ")");
  }
};

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
  void finalize() {
    std::lock_guard<std::mutex> lock(mutex);
    if (done) {
      return;
    }
    for (auto& t : divide) {
      if (at::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
        t.div_(divisor, "trunc");
      } else {
        t.div_(divisor);
      }
    }
    for (auto& [dst, src] : copy_backs) {
      // Native copy into the flagos memory: on a device accelerator a host-to-device copy on
      // the current stream that returns once the data is there.
      native_alias(dst).copy_(src);
    }
    copy_backs.clear();
    divide.clear();
    done = true;
  }
};

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
  std::vector<at::Tensor> get(const Aliases& aliases) const {
    std::vector<at::Tensor> out;
    out.reserve(entries_.size());
    for (const Entry& e : entries_) {
      if (!e.weak) {
        out.push_back(e.strong);
      } else if (auto impl = e.weak->lock()) {
        out.emplace_back(std::move(impl));
      } else {
        out.push_back(flagos_view_of_native(aliases[e.alias], e.index));
      }
    }
    return out;
  }

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

std::vector<c10::Device> flagos_devices(c10::ArrayRef<at::Tensor> tensors) {
  std::vector<c10::Device> devices;
  for (const auto& t : tensors) {
    if (is_flagos(t) && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  return devices;
}

// A work over flagos tensors: waits on the inner work, then finishes the staged outputs.
class FlagOSWork final : public c10d::Work {
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
        context_(std::move(context)) {}

  // The inner work keeps the aliases until it is destroyed (NCCL's outputs); once it is gone
  // they are handed back, so the next call of this thread reuses them instead of building
  // new ones. An alias something else still holds is left alone (release_alias checks).
  ~FlagOSWork() override {
    inner_.reset();
    for (auto& alias : aliases_) {
      release_alias(alias);
    }
  }

  bool isCompleted() override {
    if (!inner_->isCompleted()) {
      return false;
    }
    if (completion_ && !inner_->exception()) {
      completion_->finalize();
    }
    return true;
  }

  bool isSuccess() const override {
    return inner_->isSuccess();
  }

  std::exception_ptr exception() const override {
    return inner_->exception();
  }

  int sourceRank() const override {
    return inner_->sourceRank();
  }

  std::vector<at::Tensor> result() override {
    return results_.get(aliases_);
  }

  void synchronize() override {
    with_context([&] { inner_->synchronize(); });
    if (completion_) {
      completion_->finalize();
    }
  }

  bool wait(std::chrono::milliseconds timeout) override {
    bool ok = true;
    with_context([&] { ok = inner_->wait(timeout); });
    if (completion_) {
      completion_->finalize();
    }
    return ok;
  }

  void abort() override {
    inner_->abort();
  }

  float getDuration() const override {
    return inner_->getDuration();
  }

  uint64_t getSequencenumber() const override {
    return inner_->getSequencenumber();
  }

  // A future over the flagos results, on the flagos devices: waiting on it (or chaining with
  // then()) orders the current flagos streams after the collective, as CUDA futures do.
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(future_mutex_);
    if (future_) {
      return future_;
    }
    c10::intrusive_ptr<c10::ivalue::Future> inner_future;
    try {
      inner_future = inner_->getFuture();
    } catch (const c10::Error& e) {
      TORCH_CHECK(
          false,
          context_.str(),
          ": the inner backend's work has no future (",
          e.what_without_backtrace(),
          "); use wait() instead");
    }
    TORCH_CHECK(inner_future, context_.str(), ": the inner backend's work has no future");
    std::vector<at::Tensor> results = result();
    auto outer = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), flagos_devices(results));
    inner_future->addCallback(
        [completion = completion_, outer, results = std::move(results)](c10::ivalue::Future& f) {
          if (f.hasError()) {
            outer->setError(f.exception_ptr());
            return;
          }
          try {
            if (completion) {
              completion->finalize();
            }
            outer->markCompleted(c10::IValue(results));
          } catch (...) {
            outer->setError(std::current_exception());
          }
        });
    future_ = outer;
    return future_;
  }

 private:
  template <typename F>
  void with_context(F&& f) {
    try {
      f();
    } catch (c10::Error& e) {
      e.add_context(context_.str());
      throw;
    } catch (const std::exception& e) {
      // gloo reports peers that left or timed out as std::runtime_error: say where it happened.
      C10_THROW_ERROR(DistBackendError, c10::str(context_.str(), " failed: ", e.what()));
    }
  }

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
class GroupWork final : public c10d::Work {
 public:
  GroupWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works)
      : c10d::Work(rank, c10d::OpType::COALESCED), works_(std::move(works)) {}

  bool isCompleted() override {
    for (auto& w : works_) {
      if (!w->isCompleted()) {
        return false;
      }
    }
    return true;
  }

  bool isSuccess() const override {
    for (const auto& w : works_) {
      if (!w->isSuccess()) {
        return false;
      }
    }
    return true;
  }

  std::exception_ptr exception() const override {
    for (const auto& w : works_) {
      if (auto e = w->exception()) {
        return e;
      }
    }
    return nullptr;
  }

  std::vector<at::Tensor> result() override {
    std::vector<at::Tensor> all;
    for (auto& w : works_) {
      for (auto& t : w->result()) {
        all.push_back(t);
      }
    }
    return all;
  }

  void synchronize() override {
    for (auto& w : works_) {
      w->synchronize();
    }
  }

  bool wait(std::chrono::milliseconds timeout) override {
    bool ok = true;
    for (auto& w : works_) {
      ok = w->wait(timeout) && ok;
    }
    return ok;
  }

  void abort() override {
    for (auto& w : works_) {
      w->abort();
    }
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(future_mutex_);
    if (future_) {
      return future_;
    }
    if (works_.size() == 1) {
      future_ = works_[0]->getFuture();
      return future_;
    }
    std::vector<c10::intrusive_ptr<c10::ivalue::Future>> parts;
    for (auto& w : works_) {
      parts.push_back(w->getFuture());
    }
    auto all = result();
    future_ = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()), flagos_devices(all));
    if (parts.empty()) {
      future_->markCompleted(c10::IValue(all));
      return future_;
    }
    auto remaining = std::make_shared<std::atomic<size_t>>(parts.size());
    auto failed = std::make_shared<std::atomic<bool>>(false);
    for (auto& part : parts) {
      part->addCallback([outer = future_, remaining, failed, all](c10::ivalue::Future& f) {
        if (f.hasError()) {
          if (!failed->exchange(true)) {
            outer->setError(f.exception_ptr());
          }
        } else if (remaining->fetch_sub(1) == 1 && !failed->load()) {
          outer->markCompleted(c10::IValue(all));
        }
      });
    }
    return future_;
  }

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::mutex future_mutex_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

} // namespace

const char* tensor_path_name(TensorPath path) {
  return path_name(path);
}

// One collective call: validates the flagos arguments, maps them to what the inner backend
// takes, and wraps the inner work.
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

  void check(const at::Tensor& t, const char* what) {
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

  void check_dtype(const at::Tensor& t, const at::Tensor& ref, const char* what) {
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

  void check_numel(int64_t got, int64_t want, const char* what) {
    TORCH_CHECK(got == want, context(), ": ", what, " has ", got, " elements, expected ", want);
  }

  // Coalesced tensor collectives pair output i with input i; one side holds world-size times the
  // elements of the other (gathering: the outputs; scattering: the inputs).
  void check_coalesced_pairs(
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

  // A flagos tensor the collective reads.
  at::Tensor in(const at::Tensor& t, const char* what = "input") {
    check(t, what);
    return pg_.path_ == TensorPath::ZeroCopy ? zero_copy(t) : staged_copy(t);
  }

  // A flagos tensor the collective writes without reading it.
  at::Tensor out(const at::Tensor& t, const char* what = "output") {
    check(t, what);
    if (pg_.path_ == TensorPath::ZeroCopy) {
      return zero_copy_result(t);
    }
    results_.add(t);
    auto alias = native_alias(t);
    auto staged = at::empty_like(alias, alias.options().device(c10::kCPU));
    completion().copy_backs.emplace_back(t, staged);
    return staged;
  }

  // A flagos tensor the collective reads and writes.
  at::Tensor inout(const at::Tensor& t, const char* what = "tensor") {
    check(t, what);
    if (pg_.path_ == TensorPath::ZeroCopy) {
      return zero_copy_result(t);
    }
    results_.add(t);
    auto staged = staged_copy(t);
    completion().copy_backs.emplace_back(t, staged);
    return staged;
  }

  // A flagos tensor the collective reads and reports as its result (a broadcast root).
  at::Tensor in_result(const at::Tensor& t, const char* what = "tensor") {
    if (pg_.path_ == TensorPath::ZeroCopy) {
      check(t, what);
      return zero_copy_result(t);
    }
    auto inner = in(t, what);
    results_.add(t);
    return inner;
  }

  std::vector<at::Tensor> in(const std::vector<at::Tensor>& ts, const char* what = "input") {
    std::vector<at::Tensor> inner;
    inner.reserve(ts.size());
    for (const auto& t : ts) {
      inner.push_back(in(t, what));
    }
    return inner;
  }

  std::vector<at::Tensor> out(const std::vector<at::Tensor>& ts, const char* what = "output") {
    std::vector<at::Tensor> inner;
    inner.reserve(ts.size());
    for (const auto& t : ts) {
      inner.push_back(out(t, what));
    }
    return inner;
  }

  std::vector<at::Tensor> inout(const std::vector<at::Tensor>& ts, const char* what = "tensor") {
    std::vector<at::Tensor> inner;
    inner.reserve(ts.size());
    for (const auto& t : ts) {
      inner.push_back(inout(t, what));
    }
    return inner;
  }

  // The reduce op to hand the inner backend. NCCL runs every op itself; for the others AVG
  // becomes SUM followed by a division, and PREMUL_SUM a multiplication followed by SUM.
  // `inputs` are the inner input tensors (replaced when scaled); `outputs` the inner outputs;
  // `in_place` says the inputs are the outputs (all_reduce), so scaling them in place is fine.
  c10d::ReduceOp reduce_op(
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
    if (op.op_ == c10d::ReduceOp::AVG && pg_.tier_ != "nccl") {
      for (const auto& t : outputs) {
        completion().divide.push_back(t);
      }
      return c10d::ReduceOp(c10d::ReduceOp::SUM);
    }
    return op;
  }

  c10::intrusive_ptr<c10d::Work> finish(c10::intrusive_ptr<c10d::Work> inner, c10d::OpType type) {
    if (pg_.coalescing_) {
      for (auto& t : results_.get(aliases_)) {
        pg_.coalesced_results_.push_back(std::move(t));
      }
    }
    if (!inner) {
      return inner;
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

  const std::optional<c10::Device>& device() const {
    return device_;
  }

 private:
  at::Tensor zero_copy(const at::Tensor& t) {
    return aliases_.emplace_back(native_alias(t));
  }

  at::Tensor zero_copy_result(const at::Tensor& t) {
    at::Tensor alias = zero_copy(t);
    results_.add_zero_copy(t, aliases_.size() - 1);
    return alias;
  }

  at::Tensor staged_copy(const at::Tensor& t) {
    auto alias = native_alias(t);
    auto staged = at::empty_like(alias, alias.options().device(c10::kCPU));
    staged.copy_(alias); // synchronous: ordered after the work queued on the current stream
    return staged;
  }

  Completion& completion() {
    if (!completion_) {
      completion_ = std::make_shared<Completion>();
      completion_->divisor = pg_.getSize();
    }
    return *completion_;
  }

  ProcessGroupFlagOS& pg_;
  const char* op_;
  Results results_;
  Aliases aliases_;
  std::shared_ptr<Completion> completion_; // made by the first output that needs finishing
  std::optional<c10::Device> device_;
};

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

void ProcessGroupFlagOS::setTimeout(std::chrono::milliseconds timeout) {
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
  return call.finish(
      inner_->_allgather_base(inner_output, inner_input, opts), c10d::OpType::_ALLGATHER_BASE);
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
  return call.finish(
      inner_->_reduce_scatter_base(inner_output, inner_input, inner_opts),
      c10d::OpType::_REDUCE_SCATTER_BASE);
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
