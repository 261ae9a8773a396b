#include "runtime/graph_capture.h"

#include "runtime/accelerator.h"

#include <c10/util/Exception.h>

namespace torch_fl {
namespace {
// Captures may nest across graphs on one thread only in the sense of begin/end pairs; a depth
// keeps a failed inner end from clearing an outer capture.
thread_local int capture_depth = 0;
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
  ++capture_depth;
}

void note_capture_end() {
  if (capture_depth > 0) {
    --capture_depth;
  }
}

bool capturing_on_this_thread() {
  return capture_depth > 0;
}

} // namespace torch_fl
