"""Device memory statistics and the cache, as torch.cuda.memory_* report them."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import torch

from torch_fl import _C
from torch_fl.flagos._device import DeviceLike, device_index, on_cpu_accelerator
from torch_fl.flagos._monitoring import list_gpu_processes  # noqa: F401 (torch.cuda.memory has it)


def _flatten(prefix: str, value: Any, out: dict[str, int]) -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}" if prefix else key, sub, out)
    else:
        out[prefix] = value


def _stats_device(device: DeviceLike) -> int:
    """The device index of a statistics query; a negative int is refused as torch.cuda's
    allocator refuses it, rather than answering for the current device."""
    index = device if isinstance(device, int) and device < 0 else device_index(device)
    if index < 0:
        raise RuntimeError(
            f"Invalid device argument {index}: expected a flagos device index from 0 to "
            f"{_C._device_count() - 1}, or None for the current device"
        )
    return index


def memory_stats(device: DeviceLike = None) -> dict[str, int]:
    """Flat, sorted statistics with the key names torch.cuda.memory_stats uses."""
    flat: dict[str, int] = {}
    _flatten("", _C._memory_stats(_stats_device(device)), flat)
    return dict(sorted(flat.items()))


def memory_stats_as_nested_dict(device: DeviceLike = None) -> dict[str, Any]:
    """memory_stats before flattening: {"allocated_bytes": {"all": {"current": ...}}, ...}."""
    return _C._memory_stats(_stats_device(device))


def memory_allocated(device: DeviceLike = None) -> int:
    return _C._memory_stats(_stats_device(device))["allocated_bytes"]["all"]["current"]


def max_memory_allocated(device: DeviceLike = None) -> int:
    return _C._memory_stats(_stats_device(device))["allocated_bytes"]["all"]["peak"]


def memory_reserved(device: DeviceLike = None) -> int:
    return _C._memory_stats(_stats_device(device))["reserved_bytes"]["all"]["current"]


def max_memory_reserved(device: DeviceLike = None) -> int:
    return _C._memory_stats(_stats_device(device))["reserved_bytes"]["all"]["peak"]


def _renamed(old: str, new: str) -> None:
    warnings.warn(
        f"`torch.flagos.{old}` has been renamed to `torch.flagos.{new}`",
        FutureWarning,
        stacklevel=3,
    )


def memory_cached(device: DeviceLike = None) -> int:
    """torch.cuda's older name of memory_reserved (deprecated there too)."""
    _renamed("memory_cached", "memory_reserved")
    return memory_reserved(device)


def max_memory_cached(device: DeviceLike = None) -> int:
    """torch.cuda's older name of max_memory_reserved (deprecated there too)."""
    _renamed("max_memory_cached", "max_memory_reserved")
    return max_memory_reserved(device)


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    _C._reset_peak_memory_stats(_stats_device(device))


def reset_max_memory_allocated(device: DeviceLike = None) -> None:
    """An older name torch.cuda keeps (deprecated there too): resets every peak."""
    _renamed("reset_max_memory_allocated", "reset_peak_memory_stats")
    reset_peak_memory_stats(device)


def reset_max_memory_cached(device: DeviceLike = None) -> None:
    """An older name torch.cuda keeps (deprecated there too): resets every peak."""
    _renamed("reset_max_memory_cached", "reset_peak_memory_stats")
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    _C._reset_accumulated_memory_stats(_stats_device(device))


def host_memory_stats() -> dict[str, int]:
    """Statistics of pinned host memory (the cuda accelerator's are CUDA's pinned pool's), with
    torch.cuda.host_memory_stats's key names: allocations, allocated_bytes, active_requests and
    active_bytes (each .current, .peak, .allocated, .freed), num_host_alloc, num_host_free,
    host_alloc_time and host_free_time (each .total, .max, .min, .count, .avg, microseconds)."""
    flat: dict[str, int] = {}
    _flatten("", _C._host_memory_stats(), flat)
    return dict(sorted(flat.items()))


def host_memory_stats_as_nested_dict() -> dict[str, Any]:
    """host_memory_stats before flattening."""
    return _C._host_memory_stats()


def empty_host_cache() -> None:
    """Returns cached, unused pinned host memory to the system: torch.accelerator.empty_host_cache
    for flagos, also on torch versions whose torch.accelerator lacks it (2.11 and older)."""
    _C._empty_host_cache()


def reset_peak_host_memory_stats() -> None:
    _C._reset_peak_host_memory_stats()


def reset_accumulated_host_memory_stats() -> None:
    _C._reset_accumulated_host_memory_stats()


def set_per_process_memory_fraction(fraction: float, device: DeviceLike = None) -> None:
    """Limits the memory this process may reserve on the device to `fraction` of its total, as
    torch.cuda.set_per_process_memory_fraction: past it, allocations raise OutOfMemoryError."""
    index = _C._resolve_device_index(device_index(device, current_ok=False))
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    if _C._native_device_type() == "cuda":
        # flagos:N is cuda:N and draws from its pool, whose limit this is.
        torch.cuda.set_per_process_memory_fraction(fraction, index)
    else:
        _C._set_memory_fraction(fraction, index)


def get_per_process_memory_fraction(device: DeviceLike = None) -> float:
    """The fraction set by set_per_process_memory_fraction (1.0 unless set)."""
    index = _C._resolve_device_index(device_index(device, current_ok=False))
    if _C._native_device_type() != "cuda":
        return _C._memory_fraction(index)
    native = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if native is None:
        raise RuntimeError(
            f"torch {torch.__version__} cannot read the CUDA pool's memory fraction "
            "(torch.cuda.get_per_process_memory_fraction is missing)"
        )
    return native(index)


def empty_cache() -> None:
    """Returns cached, unused device memory to the system."""
    _C._empty_cache()


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of the device's memory."""
    return tuple(_C._mem_get_info(_stats_device(device)))


def _format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


_SUMMARY_ROWS = (
    ("Allocated memory", "allocated_bytes", True),
    ("Active memory", "active_bytes", True),
    ("Requested memory", "requested_bytes", True),
    ("Reserved memory", "reserved_bytes", True),
    ("Allocations", "allocation", False),
    ("Active allocations", "active", False),
    ("Reserved segments", "segment", False),
)


_SUMMARY_FIELDS = ("current", "peak", "allocated", "freed")
_SUMMARY_COUNTS = (
    ("Device allocations", "num_device_alloc"),
    ("Device frees", "num_device_free"),
    ("Allocation retries", "num_alloc_retries"),
    ("Out-of-memory errors", "num_ooms"),
)


def memory_summary(device: DeviceLike = None, abbreviated: bool = False) -> str:
    """A printable table of memory_stats(device), shaped like torch.cuda.memory_summary: per
    statistic its current and peak values and the totals allocated and freed since the last
    reset, for all pools (and the small and large pools unless `abbreviated`)."""
    index = _stats_device(device)
    stats = memory_stats(index)
    pools = ("all",) if abbreviated else ("all", "large_pool", "small_pool")
    header = f"{'Metric':<34}{'Cur Usage':>13}{'Peak Usage':>13}{'Tot Alloc':>13}{'Tot Freed':>13}"
    rule = "=" * len(header)
    lines = [rule, f" flagos:{index} memory summary ({_C._accelerator_name()} accelerator)", rule]
    lines.append(header)
    for title, key, is_bytes in _SUMMARY_ROWS:
        lines.append("-" * len(header))
        for pool in pools:
            label = title if pool == "all" else f"  from {pool.replace('_', ' ')}"
            values = [stats.get(f"{key}.{pool}.{f}", 0) for f in _SUMMARY_FIELDS]
            shown = [_format_bytes(v) if is_bytes else str(v) for v in values]
            lines.append(f"{label:<34}" + "".join(f"{v:>13}" for v in shown))
    lines.append("-" * len(header))
    for title, key in _SUMMARY_COUNTS:
        lines.append(f"{title:<34}{stats.get(key, 0):>13}")
    lines.append(rule)
    return "\n".join(lines) + "\n"


# ---- snapshots: which memory is where, as torch.cuda.memory._snapshot reports it ----

_SMALL_SEGMENT = 1 << 20  # torch.cuda calls segments below 1 MiB "small"


def _segment(raw: dict[str, Any]) -> dict[str, Any]:
    """One segment of the cpu accelerator's pool in torch.cuda's snapshot format. Blocks are
    never split there, so each segment holds exactly one block."""
    used = raw["size"] if raw["in_use"] else 0
    block = {
        "address": raw["address"],
        "size": raw["size"],
        "requested_size": raw["requested"],
        "state": "active_allocated" if raw["in_use"] else "inactive",
        "frames": [],
    }
    return {
        "device": raw["device"],
        "address": raw["address"],
        "total_size": raw["size"],
        "allocated_size": used,
        "active_size": used,
        "requested_size": raw["requested"],
        "stream": 0,
        "segment_type": "small" if raw["size"] < _SMALL_SEGMENT else "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        # memory a native kernel allocated and flagos adopted (a routed call's result)
        "adopted": raw["adopted"],
        "frames": [],
        "blocks": [block],
    }


def memory_snapshot(mempool_id: Any = None, include_traces: bool = True) -> list[dict[str, Any]]:
    """The segments of flagos device memory, in torch.cuda.memory_snapshot's format.

    On a device accelerator flagos memory is the native pool's (flagos:N is cuda:N), so this is
    torch.cuda.memory_snapshot: native tensors' segments included. On the cpu accelerator:
    every segment of the flagos pool (in use, cached, or adopted from a native kernel), sorted
    by device and address; that pool records no traces and has no private pools, so
    `include_traces` changes nothing there and `mempool_id` must be None."""
    if not on_cpu_accelerator():
        # include_traces only when given: older torch's memory_snapshot lacks it.
        extra = {} if include_traces else {"include_traces": False}
        return torch.cuda.memory_snapshot(mempool_id, **extra)
    if mempool_id is not None:
        raise ValueError(
            f"torch.flagos.memory_snapshot(mempool_id={mempool_id!r}): the cpu accelerator's "
            "pool has no private memory pools; pass mempool_id=None"
        )
    segments = [_segment(raw) for raw in _C._memory_segments()]
    return sorted(segments, key=lambda s: (s["device"], s["address"]))


def _snapshot(device: DeviceLike = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
    """torch.cuda.memory._snapshot for flagos: {"segments": ..., "device_traces": ...}. The cpu
    accelerator records no allocation history, so its traces are empty."""
    if not on_cpu_accelerator():
        return torch.cuda.memory._snapshot(device, augment_with_fx_traces=augment_with_fx_traces)
    return {
        "segments": memory_snapshot(),
        "device_traces": [[] for _ in range(_C._device_count())],
        "allocator_settings": {},
    }


def _dump_snapshot(filename: str = "dump_snapshot.pickle") -> None:
    """Pickles _snapshot() to `filename` (the format pytorch.org/memory_viz reads)."""
    import pickle

    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)


def _record_memory_history(enabled: str | None = "all", *args: Any, **kwargs: Any) -> None:
    """Starts (or with enabled=None stops) recording a stack trace for every allocation, as
    torch.cuda.memory._record_memory_history does: on a device accelerator flagos allocations
    are the native pool's, recorded there. The cpu accelerator keeps no history."""
    if not on_cpu_accelerator():
        torch.cuda.memory._record_memory_history(enabled, *args, **kwargs)
        return
    if enabled is None:
        return  # stopping: nothing records (a `finally:` that stops must not raise)
    raise NotImplementedError(
        "torch.flagos.memory._record_memory_history: the cpu accelerator's allocator records no "
        "allocation history; torch.flagos.memory_snapshot() lists its segments. Record history "
        "on the cuda accelerator."
    )


# ---- raw allocations (torch.cuda.caching_allocator_alloc / _delete) ----

_raw_blocks: dict[int, torch.Tensor] = {}
_raw_lock = threading.Lock()


def caching_allocator_alloc(size: int, device: DeviceLike = None, stream: Any = None) -> int:
    """`size` bytes from the flagos caching allocator on `device` (allocated on `stream` when
    given); returns the address. Counted in memory_allocated until caching_allocator_delete."""
    from torch_fl.flagos._streams import stream as stream_context

    if size < 0:
        raise ValueError(f"caching_allocator_alloc: size must be >= 0, got {size}")
    if stream is not None and not isinstance(stream, torch.Stream):
        # torch.cuda takes a raw cudaStream_t as an int; flagos streams are torch.Stream objects.
        raise TypeError(
            "caching_allocator_alloc: stream must be a torch.flagos.Stream (or a torch.Stream on "
            f"a flagos device) or None, got {type(stream).__name__}"
        )
    if size == 0:
        return 0
    where = torch.device("flagos", device_index(device))
    with stream_context(stream):
        block = torch.empty(size, dtype=torch.uint8, device=where)
    with _raw_lock:
        _raw_blocks[block.data_ptr()] = block
    return block.data_ptr()


def caching_allocator_delete(mem_ptr: int) -> None:
    """Returns memory from caching_allocator_alloc to the allocator's cache."""
    if mem_ptr == 0:
        return
    with _raw_lock:
        block = _raw_blocks.pop(mem_ptr, None)
    if block is None:
        raise ValueError(
            f"caching_allocator_delete: {mem_ptr:#x} was not allocated by "
            "torch.flagos.caching_allocator_alloc (or was deleted already)"
        )


def get_allocator_backend() -> str:
    """The device allocator: torch.cuda's backend on the cuda accelerator (flagos uses its pool),
    "native" (the flagos caching allocator) on the cpu accelerator."""
    if not on_cpu_accelerator():
        return torch.cuda.get_allocator_backend()
    return "native"
