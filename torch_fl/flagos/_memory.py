"""Device memory statistics and the cache, as torch.cuda.memory_* report them."""

from __future__ import annotations

from typing import Any

from torch_fl import _C
from torch_fl.flagos._device import DeviceLike, device_index


def _flatten(prefix: str, value: Any, out: dict[str, int]) -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}" if prefix else key, sub, out)
    else:
        out[prefix] = value


def memory_stats(device: DeviceLike = None) -> dict[str, int]:
    """Flat, sorted statistics with the key names torch.cuda.memory_stats uses."""
    flat: dict[str, int] = {}
    _flatten("", _C._memory_stats(device_index(device)), flat)
    return dict(sorted(flat.items()))


def memory_allocated(device: DeviceLike = None) -> int:
    return _C._memory_stats(device_index(device))["allocated_bytes"]["all"]["current"]


def max_memory_allocated(device: DeviceLike = None) -> int:
    return _C._memory_stats(device_index(device))["allocated_bytes"]["all"]["peak"]


def memory_reserved(device: DeviceLike = None) -> int:
    return _C._memory_stats(device_index(device))["reserved_bytes"]["all"]["current"]


def max_memory_reserved(device: DeviceLike = None) -> int:
    return _C._memory_stats(device_index(device))["reserved_bytes"]["all"]["peak"]


def reset_peak_memory_stats(device: DeviceLike = None) -> None:
    _C._reset_peak_memory_stats(device_index(device))


def reset_accumulated_memory_stats(device: DeviceLike = None) -> None:
    _C._reset_accumulated_memory_stats(device_index(device))


def empty_cache() -> None:
    """Returns cached, unused device memory to the system."""
    _C._empty_cache()


def mem_get_info(device: DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of the device's memory."""
    return tuple(_C._mem_get_info(device_index(device)))
