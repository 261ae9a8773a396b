"""Graph capture on the cpu accelerator: record the flagos operators of a block, replay them.

A CUDA graph records kernels and replays them on the same memory. The cpu accelerator runs each
operator on the host when it is called, so its graph records the calls instead (a dispatch mode,
active on the capturing thread only during capture) and replays them on the same tensors: an
in-place or out= operator runs again on its captured arguments; a functional one runs again and
its result is copied into the tensor the capture returned; views and empty factories are
skipped (they share or merely own captured memory). What the block returned is therefore updated
in place by every replay, as with CUDA graphs, and random operators draw fresh numbers. Operators
that involve no flagos tensor run during capture only (CUDA graphs do not replay host work
either), and those that wait for the device's results (`.item()`, `nonzero`, copies to the cpu)
are refused, as a CUDA capture refuses them.

A CUDA capture runs nothing, so tensors that existed before it hold the same values after it:
the recorder saves each one's contents before an operator of the capture first writes it and
puts them back when the capture ends (a training step captured whole updates the weights on
replays only, as on CUDA). Tensors made during the capture keep what the capture computed.

Replays cost what the recorded calls cost (plus a copy per functional result): this exists so
that code written for graphs runs unchanged on the cpu accelerator, not to make it faster.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_aten = torch.ops.aten

# Operators that read device results back to the host: a capture cannot contain them.
_HOST_SYNC = {
    _aten._local_scalar_dense.default,
    _aten.nonzero.default,
    _aten.masked_select.default,
    _aten.unique_consecutive.default,
    _aten._unique2.default,
    _aten.is_nonzero.default,
    _aten.equal.default,
}
# Factories whose result's contents the capture does not define: nothing to replay.
_NO_REPLAY = {
    _aten.empty.memory_format,
    _aten.empty_strided.default,
    _aten.empty_like.default,
}

_pool_ids = itertools.count(1)
_pool_lock = threading.Lock()


def new_pool_id() -> tuple[int, int]:
    with _pool_lock:
        return (0, next(_pool_ids))


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _on_flagos(args: Any, kwargs: Any, out: Any) -> bool:
    return any(t.device.type == "flagos" for t in _tensors((args, kwargs, out)))


def _is_view(func: torch._ops.OpOverload) -> bool:
    returns = func._schema.returns
    return bool(returns) and all(
        r.alias_info is not None and not r.alias_info.is_write for r in returns
    )


def _written(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensors `func` writes (its Tensor(a!) arguments, lists included)."""
    written: list[torch.Tensor] = []
    for i, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(argument.name)
        written.extend(_tensors(value))
    return written


def _region(t: torch.Tensor) -> tuple:
    return (t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride(), t.dtype)


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[Any, tuple, dict, Any]] = []
        # Memory the capture allocated (storage addresses), and the contents of earlier
        # tensors as they were before the capture first wrote them, in order.
        self._fresh: set[int] = set()
        self._saved: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def _save_before_write(self, func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> None:
        for t in _written(func, args, kwargs):
            if t.device.type != "flagos" or t.untyped_storage().data_ptr() in self._fresh:
                continue
            region = _region(t)
            if region not in self._saved:
                self._saved[region] = (t, t.detach().clone())

    def restore(self) -> None:
        """Puts back what the capture wrote into tensors made before it (latest first, so a
        region written through two views ends as it began)."""
        with torch.no_grad():
            for t, before in reversed(self._saved.values()):
                if t.shape == before.shape:  # an out= the capture resized is left as it is
                    t.detach().copy_(before)
        self._saved.clear()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func in _HOST_SYNC and _on_flagos(args, kwargs, None):
            raise RuntimeError(
                f"{func} waits for the device's results on the host, which a graph capture "
                "cannot contain (a CUDA capture refuses it too); call it outside the capture"
            )
        if func is _aten._to_copy.default or func is _aten.copy_.default:
            devices = {t.device.type for t in _tensors((args, kwargs))}
            target = kwargs.get("device")
            if "flagos" in devices and (
                (target is not None and torch.device(target).type != "flagos")
                or (func is _aten.copy_.default and args[0].device.type != "flagos")
            ):
                raise RuntimeError(
                    "copying a flagos tensor to the host inside a graph capture waits for the "
                    "device (a CUDA capture refuses it too); copy outside the capture"
                )
        mutable = func._schema.is_mutable
        if mutable:
            self._save_before_write(func, args, kwargs)
        out = func(*args, **kwargs)
        if not mutable and not _is_view(func):
            self._fresh.update(
                t.untyped_storage().data_ptr() for t in _tensors(out) if t.device.type == "flagos"
            )
        if _on_flagos(args, kwargs, out) and not _is_view(func) and func not in _NO_REPLAY:
            self.steps.append((func, args, kwargs, out))
        return out


class HostGraph:
    """The cpu accelerator's FlagOSGraph behind torch.flagos.FlagOSGraph (same methods)."""

    def __init__(self) -> None:
        self._recorder: _Recorder | None = None
        self._steps: list[tuple[Any, tuple, dict, Any]] = []
        self._pool: tuple[int, int] | None = None
        self._captured = False

    def capture_begin(self, pool: tuple[int, int] | None = None) -> None:
        if self._recorder is not None or self._captured:
            raise RuntimeError("this FlagOSGraph holds a capture already; reset() it first")
        self._pool = pool if pool is not None else new_pool_id()
        self._recorder = _Recorder()
        self._recorder.__enter__()

    def capture_end(self, warn_if_empty: bool = True) -> None:
        if self._recorder is None:
            raise RuntimeError("capture_end() without capture_begin()")
        recorder, self._recorder = self._recorder, None
        recorder.__exit__(None, None, None)
        recorder.restore()
        self._steps = recorder.steps
        self._captured = True
        if warn_if_empty and not self._steps:  # as CUDA warns of an empty graph
            warnings.warn(
                "The FlagOSGraph is empty: no flagos operator ran during the capture. This "
                "usually means the work was issued on another device or before capture_begin.",
                stacklevel=4,
            )

    def replay(self) -> None:
        if self._recorder is not None:
            raise RuntimeError("replay() during capture: end the capture first")
        if not self._captured:
            raise RuntimeError(
                "FlagOSGraph.replay() without a preceding capture: capture first "
                "(`with torch.flagos.graph(g): ...`, or capture_begin() and capture_end())"
            )
        with torch.no_grad():
            for func, args, kwargs, out in self._steps:
                fresh = func(*args, **kwargs)
                if not func._schema.is_mutable:
                    for captured, new in zip(_tensors(out), _tensors(fresh), strict=True):
                        captured.copy_(new)

    def reset(self) -> None:
        if self._recorder is not None:
            self.capture_end()
        self._steps = []
        self._pool = None
        self._captured = False

    def debug_dump(self, path: str) -> None:
        with open(path, "w") as f:
            f.writelines(f"{func}\n" for func, _, _, _ in self._steps)

    def pool(self) -> tuple[int, int]:
        if self._pool is None:
            raise RuntimeError("this FlagOSGraph has captured nothing, so it has no pool yet")
        return self._pool
