#pragma once

#include "macros.h"

// Graph capture of flagos work (torch.flagos.FlagOSGraph, torch.accelerator.Graph). flagos
// streams are the native device's streams, so the native graph (a CUDA graph on the cuda
// accelerator) records flagos kernels as it records its own; torch_fl only adds the refusal of
// device graphs on the cpu accelerator and a clear error for work that cannot be captured.

#include <c10/core/Stream.h>

#include <string>

namespace torch_fl {

// Throws, saying why, unless this build's accelerator can capture device graphs (device
// accelerators can; the cpu accelerator runs each operator on the host when it is called, and
// its FlagOSGraph records operators in Python instead).
FLAGOS_API void check_graph_capture_supported(const char* what);

// A capture started or ended on this thread; it records the thread's current stream.
FLAGOS_API void note_capture_begin();
FLAGOS_API void note_capture_end();
// Whether a flagos graph is capturing on this thread.
FLAGOS_API bool capturing_on_this_thread();
// Whether a capture (begun on any thread) records `stream`.
FLAGOS_API bool is_capturing_stream(const c10::Stream& stream);
// Whether work queued now from this thread would be captured: it began a capture, or its
// current stream is one a capture records (the autograd engine's thread in a captured backward).
FLAGOS_API bool current_stream_is_capturing();

} // namespace torch_fl
