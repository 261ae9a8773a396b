#include "runtime/graph_capture.h"

#include "runtime/accelerator.h"
#include "runtime/fork_safe_mutex.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <vector>

namespace torch_fl {
namespace {

// The streams this thread began capturing, innermost last. Captures nest only as begin/end
// pairs, and an end without a begin (a failed end of another graph) must not clear one.
thread_local std::vector<c10::Stream> t_captures;

// Every thread's capturing streams: work queued on one of them from another thread (the
// autograd engine's device thread runs a captured backward on the forward's stream) is captured
// too, so what cannot be captured must be refused there as well.
struct CapturingStreams {
  std::atomic<int> count{0}; // read first: no lock on the common path, when nothing captures
  ForkSafeMutex mutex;
  std::vector<c10::Stream> streams;
};

CapturingStreams& capturing_streams() {
  static auto* streams = new CapturingStreams(); // never destroyed: captures may end at exit
  return *streams;
}

c10::Stream current_stream() {
  const auto& guard = accelerator().guard();
  return guard.getStream(guard.getDevice());
}

} // namespace

void check_graph_capture_supported(const char* what) {
  TORCH_CHECK(
      accelerator().native_device_type() != c10::DeviceType::CPU,
      what,
      " needs a device accelerator: this torch_fl build runs flagos on the cpu accelerator, "
      "where every operator executes on the host when it is called, so there are no device "
      "kernels to capture. torch.flagos.FlagOSGraph (and torch.flagos.graph) records and "
      "replays the operators instead; device graphs need the cuda accelerator "
      "(FLAGOS_ACCELERATOR=cuda).");
}

void note_capture_begin() {
  const c10::Stream stream = current_stream();
  auto& all = capturing_streams();
  std::lock_guard lock(all.mutex);
  t_captures.push_back(stream);
  all.streams.push_back(stream);
  all.count.fetch_add(1, std::memory_order_release);
}

void note_capture_end() {
  if (t_captures.empty()) {
    return;
  }
  auto& all = capturing_streams();
  std::lock_guard lock(all.mutex);
  const auto it = std::find(all.streams.begin(), all.streams.end(), t_captures.back());
  if (it != all.streams.end()) {
    all.streams.erase(it);
    all.count.fetch_sub(1, std::memory_order_release);
  }
  t_captures.pop_back();
}

bool capturing_on_this_thread() {
  return !t_captures.empty();
}

bool is_capturing_stream(const c10::Stream& stream) {
  auto& all = capturing_streams();
  if (all.count.load(std::memory_order_acquire) == 0) {
    return false;
  }
  std::lock_guard lock(all.mutex);
  return std::find(all.streams.begin(), all.streams.end(), stream) != all.streams.end();
}

bool current_stream_is_capturing() {
  return capturing_on_this_thread() || is_capturing_stream(current_stream());
}

} // namespace torch_fl
