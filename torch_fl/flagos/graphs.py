"""Graph capture and replay of flagos work: `torch.flagos.FlagOSGraph`, `torch.flagos.graph`,
`torch.flagos.graph_pool_handle` and `torch.flagos.make_graphed_callables`, shaped like their
`torch.cuda` namesakes.

flagos streams are the native device's streams and flagos memory comes from its caching
allocator, so the native graph (a CUDA graph on the cuda accelerator) records the kernels that
flagos operators launch exactly as it records its own, and allocations made during capture land
in the graph's private pool. These classes add the flagos streams and a clear error for an
operator on the cpu_fallback route inside a capture. The cpu accelerator, which runs operators
on the host as they are called, records the operators and replays them instead
(`_host_graph.py`), so code written for graphs runs there unchanged. On torch 2.13 and newer,
`torch.accelerator.Graph` works on flagos device accelerators too (registered in C++).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

import torch

from torch_fl import _C
from torch_fl.flagos._device import current_device, on_cpu_accelerator, synchronize
from torch_fl.flagos._host_graph import HostGraph, new_pool_id
from torch_fl.flagos._memory import empty_cache
from torch_fl.flagos._streams import (
    Stream,
    current_stream,
    default_stream,
    is_current_stream_capturing,  # noqa: F401 (torch.cuda.graphs has it)
    stream,
)

PoolHandle = tuple[int, int]

_CAPTURE_MODES = ("global", "thread_local", "relaxed")


def graph_pool_handle() -> PoolHandle:
    """An opaque token naming a memory pool that several graphs may share (pass it as `pool`)."""
    if on_cpu_accelerator():
        return new_pool_id()  # a host graph keeps what it captured alive; ids only match
    return torch.cuda.graph_pool_handle()


class FlagOSGraph:
    """A captured sequence of flagos device work that can be replayed (like torch.cuda.CUDAGraph).

    Capture on a side stream (`torch.flagos.graph` does that for you); the memory of tensors
    made during capture stays reserved for the graph, so replays write to the same addresses.
    """

    def __init__(self, keep_graph: bool = False) -> None:
        # The cpu accelerator has no device kernels to capture: it records the operators.
        self._native: Any = (
            HostGraph() if on_cpu_accelerator() else torch.cuda.CUDAGraph(keep_graph)
        )
        self._marked_capturing = False

    def capture_begin(
        self, pool: PoolHandle | None = None, capture_error_mode: str = "global"
    ) -> None:
        """Starts capturing the work issued on the current flagos stream."""
        if capture_error_mode not in _CAPTURE_MODES:
            raise ValueError(
                f"capture_error_mode must be one of {', '.join(_CAPTURE_MODES)}; "
                f"got {capture_error_mode!r}"
            )
        if current_stream() == default_stream():
            raise RuntimeError(
                "torch.flagos.FlagOSGraph.capture_begin: graphs cannot be captured on the "
                "default stream. Capture inside `with torch.flagos.graph(g):`, or make a side "
                "stream current first (`with torch.flagos.stream(torch.flagos.Stream()):`)."
            )
        if isinstance(self._native, HostGraph):
            self._native.capture_begin(pool)
        else:
            self._native.capture_begin(pool=pool, capture_error_mode=capture_error_mode)
        _C._note_capture_begin()
        self._marked_capturing = True

    def capture_end(self) -> None:
        """Ends the capture; unless `keep_graph`, the graph is also instantiated."""
        self._end_capture(warn_if_empty=True)

    def _end_capture(self, warn_if_empty: bool) -> None:
        # Only a graph that began a capture drops the thread's capture mark: one that never
        # began raises below, and another graph's capture stays marked.
        if self._marked_capturing:
            self._marked_capturing = False
            _C._note_capture_end()
        if isinstance(self._native, HostGraph):
            self._native.capture_end(warn_if_empty)
        else:
            self._native.capture_end()

    def instantiate(self) -> None:
        if not isinstance(self._native, HostGraph):  # a host graph needs no instantiation
            self._native.instantiate()

    def replay(self) -> None:
        """Runs the captured work again on the current stream."""
        self._native.replay()

    def reset(self) -> None:
        """Drops the captured graph and its memory pool reference; the object can capture again."""
        self._native.reset()

    def pool(self) -> PoolHandle:
        """This graph's memory pool, to share with a later capture (`pool=` argument)."""
        return self._native.pool()

    def enable_debug_mode(self) -> None:
        if not isinstance(self._native, HostGraph):  # a host graph always keeps its record
            self._native.enable_debug_mode()

    def debug_dump(self, debug_path: str) -> None:
        """Writes the captured graph (CUDA's dump; on the cpu accelerator the recorded
        operators, one per line)."""
        self._native.debug_dump(debug_path)


class graph:  # noqa: N801 (named as torch.cuda.graph)
    """Context manager capturing the flagos work of its block into a FlagOSGraph.

    Synchronises the device and empties the allocator's cache before capture, and captures on
    `stream` (default: a side stream per device, kept for later captures).
    """

    _default_streams: dict[int, Stream] = {}
    _lock = threading.Lock()

    def __init__(
        self,
        flagos_graph: FlagOSGraph | None = None,
        pool: PoolHandle | None = None,
        stream: Stream | None = None,
        capture_error_mode: str = "global",
        enable_annotations: bool = False,
        check_input_liveness: bool = False,
        *,
        cuda_graph: FlagOSGraph | None = None,
    ) -> None:
        # torch.cuda.graph's keyword names are accepted, so `graph(cuda_graph=g)` ports as is.
        if (flagos_graph is None) == (cuda_graph is None):
            raise TypeError(
                "torch.flagos.graph takes one FlagOSGraph (positional, flagos_graph= or "
                "cuda_graph=)"
            )
        flagos_graph = flagos_graph if flagos_graph is not None else cuda_graph
        if enable_annotations or check_input_liveness:
            raise NotImplementedError(
                "torch.flagos.graph: enable_annotations and check_input_liveness (CUDA graph "
                "debugging aids) are not supported for flagos graphs; leave them False"
            )
        if not isinstance(flagos_graph, FlagOSGraph):
            raise TypeError(
                f"torch.flagos.graph expects a torch.flagos.FlagOSGraph, got "
                f"{type(flagos_graph).__name__}"
            )
        self.flagos_graph = flagos_graph
        self.pool = pool
        self.capture_stream = stream if stream is not None else self._default_stream()
        self.capture_error_mode = capture_error_mode
        self._stream_ctx: Any = None

    @classmethod
    def _default_stream(cls) -> Stream:
        index = current_device()
        with cls._lock:
            if index not in cls._default_streams:
                cls._default_streams[index] = Stream()
            return cls._default_streams[index]

    def __enter__(self) -> None:
        synchronize()
        gc.collect()
        empty_cache()
        self._stream_ctx = stream(self.capture_stream)
        self._stream_ctx.__enter__()
        try:
            self.flagos_graph.capture_begin(self.pool, capture_error_mode=self.capture_error_mode)
        except BaseException:
            self._stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, *exc: object) -> bool:
        try:
            # A capture that failed is ended without a warning that it is empty.
            self.flagos_graph._end_capture(warn_if_empty=exc[0] is None)
        finally:
            self._stream_ctx.__exit__(*exc)
        return False


def make_graphed_callables(
    callables: Callable[..., Any] | tuple[Callable[..., Any], ...],
    sample_args: tuple[Any, ...],
    num_warmup_iters: int = 3,
    allow_unused_input: bool = False,
    pool: PoolHandle | None = None,
) -> Any:
    """Graphed versions of modules or functions, forward and backward each replayed from a
    graph (torch.cuda.make_graphed_callables over flagos tensors; same rules and arguments)."""
    _C._check_graph_capture_supported("torch.flagos.make_graphed_callables")
    return torch.cuda.make_graphed_callables(
        callables,
        sample_args,
        num_warmup_iters=num_warmup_iters,
        allow_unused_input=allow_unused_input,
        pool=pool,
    )
