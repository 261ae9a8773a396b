#include "comm/work.h"

#include "aten/alias.h"
#include "runtime/fork_safe_mutex.h"

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <set>

namespace torch_fl::comm {
namespace {

std::vector<c10::Device> flagos_devices(c10::ArrayRef<at::Tensor> tensors) {
  std::vector<c10::Device> devices;
  for (const auto& t : tensors) {
    if (is_flagos(t) && std::find(devices.begin(), devices.end(), t.device()) == devices.end()) {
      devices.push_back(t.device());
    }
  }
  return devices;
}

} // namespace

const char* tensor_path_name(TensorPath path) {
  return path == TensorPath::ZeroCopy ? "zero_copy" : "host_staged";
}

const char* interned_name(const std::string& name) {
  static auto* mutex = new ForkSafeMutex();         // leaked with the names
  static auto* names = new std::set<std::string>(); // leaked: works may die after exit hooks
  std::lock_guard lock(*mutex);
  return names->insert(name).first->c_str();
}

std::string WorkContext::str() const {
  return c10::str(
      "ProcessGroupFlagOS ",
      op,
      " (tier ",
      tier,
      ", ",
      tensor_path_name(path),
      ", rank ",
      rank,
      " of ",
      size,
      ")");
}

void Completion::finalize() {
  std::lock_guard<std::mutex> lock(mutex);
  if (done) {
    return;
  }
  // Each step is dropped once done, so a call that failed part way (and is made again by
  // wait() after the completion callback) never divides twice.
  while (!divide.empty()) {
    auto& t = divide.back();
    if (at::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
      t.div_(divisor, "trunc");
    } else {
      t.div_(divisor);
    }
    divide.pop_back();
  }
  while (!copy_backs.empty()) {
    auto& [dst, src] = copy_backs.back();
    // Native copy into the flagos memory: on a device accelerator a host-to-device copy on
    // the current stream that returns once the data is there.
    native_alias(dst).copy_(src);
    copy_backs.pop_back();
  }
  done = true;
}

void finalize_when_complete(c10d::Work& inner, const std::shared_ptr<Completion>& completion) {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  try {
    future = inner.getFuture();
  } catch (const std::exception&) {
    return; // a work without a future (gloo's send/recv): finished by wait()
  }
  if (!future) {
    return;
  }
  future->addCallback([completion](c10::ivalue::Future& f) {
    if (f.hasError()) {
      return; // wait() raises the collective's error
    }
    try {
      completion->finalize();
    } catch (const std::exception&) {
      // Left for wait() (or synchronize()), which makes the call again and raises.
    }
  });
}

std::vector<at::Tensor> Results::get(const Aliases& aliases) const {
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

// ---- FlagOSWork

namespace {

// The inner backend's error, said where it happened: torch's errors keep their type and gain
// the context (once: wait() and the future may report one error object); others (gloo reports
// peers that left or timed out as std::runtime_error) become a DistBackendError.
std::exception_ptr in_context(std::exception_ptr error, const std::string& context) {
  try {
    std::rethrow_exception(error);
  } catch (c10::Error& e) {
    if (e.msg().find(context) == std::string::npos) {
      e.add_context(context);
    }
    return std::current_exception();
  } catch (const std::exception& e) {
    return std::make_exception_ptr(
        C10_BUILD_ERROR(DistBackendError, c10::str(context, " failed: ", e.what())));
  } catch (...) {
    return std::current_exception();
  }
}

} // namespace

template <typename F>
void FlagOSWork::with_context(F&& f) {
  try {
    f();
  } catch (...) {
    std::rethrow_exception(in_context(std::current_exception(), context_.str()));
  }
}

// The inner work keeps the aliases until it is destroyed (NCCL's outputs); once it is gone
// they are handed back, so the next call of this thread reuses them instead of building
// new ones. An alias something else still holds is left alone (release_alias checks).
FlagOSWork::~FlagOSWork() {
  inner_.reset();
  for (auto& alias : aliases_) {
    release_alias(alias);
  }
}

bool FlagOSWork::isCompleted() {
  if (!inner_->isCompleted()) {
    return false;
  }
  if (completion_ && !inner_->exception()) {
    completion_->finalize();
  }
  return true;
}

bool FlagOSWork::isSuccess() const {
  return inner_->isSuccess();
}

std::exception_ptr FlagOSWork::exception() const {
  return inner_->exception();
}

int FlagOSWork::sourceRank() const {
  return inner_->sourceRank();
}

std::vector<at::Tensor> FlagOSWork::result() {
  return results_.get(aliases_);
}

void FlagOSWork::synchronize() {
  with_context([&] { inner_->synchronize(); });
  if (completion_) {
    completion_->finalize();
  }
}

bool FlagOSWork::wait(std::chrono::milliseconds timeout) {
  bool ok = true;
  with_context([&] { ok = inner_->wait(timeout); });
  if (completion_) {
    completion_->finalize();
  }
  return ok;
}

void FlagOSWork::abort() {
  inner_->abort();
}

float FlagOSWork::getDuration() const {
  return inner_->getDuration();
}

uint64_t FlagOSWork::getSequencenumber() const {
  return inner_->getSequencenumber();
}

c10::intrusive_ptr<c10::ivalue::Future> FlagOSWork::getFuture() {
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
      [completion = completion_, outer, results = std::move(results), context = context_.str()](
          c10::ivalue::Future& f) {
        if (f.hasError()) {
          outer->setError(in_context(f.exception_ptr(), context));
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

// ---- GroupWork

bool GroupWork::isCompleted() {
  for (auto& w : works_) {
    if (!w->isCompleted()) {
      return false;
    }
  }
  return true;
}

bool GroupWork::isSuccess() const {
  for (const auto& w : works_) {
    if (!w->isSuccess()) {
      return false;
    }
  }
  return true;
}

std::exception_ptr GroupWork::exception() const {
  for (const auto& w : works_) {
    if (auto e = w->exception()) {
      return e;
    }
  }
  return nullptr;
}

std::vector<at::Tensor> GroupWork::result() {
  std::vector<at::Tensor> all;
  for (auto& w : works_) {
    for (auto& t : w->result()) {
      all.push_back(t);
    }
  }
  return all;
}

void GroupWork::synchronize() {
  for (auto& w : works_) {
    w->synchronize();
  }
}

bool GroupWork::wait(std::chrono::milliseconds timeout) {
  bool ok = true;
  for (auto& w : works_) {
    ok = w->wait(timeout) && ok;
  }
  return ok;
}

void GroupWork::abort() {
  for (auto& w : works_) {
    w->abort();
  }
}

c10::intrusive_ptr<c10::ivalue::Future> GroupWork::getFuture() {
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

} // namespace torch_fl::comm
