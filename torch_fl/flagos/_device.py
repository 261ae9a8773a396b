"""Device indices and the current device."""

from __future__ import annotations

import torch

from torch_fl import _C

_NAME = "flagos"

DeviceLike = torch.device | str | int | None


def device_index(device: DeviceLike, optional: bool = True, current_ok: bool = True) -> int:
    """Turns None, an int, 'flagos', 'flagos:N' or a torch.device into an index (-1: current).

    An int must name a flagos device (IndexError naming the valid range otherwise: 257 is not
    flagos:1), or be -1 for the current device where `current_ok`; functions that torch.cuda
    gives only real devices (properties, RNG state, memory limits) pass current_ok=False, so a
    CPU tensor's get_device() (-1) is refused there rather than read as the current device."""
    if device is None:
        if not optional:
            raise ValueError("Expected a flagos device, got None")
        return _C._current_device()
    if isinstance(device, int):
        if device != -1 or not current_ok:
            _C._check_device_index(device)
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != _NAME:
            raise ValueError(f"Expected a flagos device, got {device}")
        return _C._current_device() if device.index is None else device.index
    raise TypeError(f"Expected a flagos device (int, str or torch.device), got {device!r}")


def on_cpu_accelerator() -> bool:
    """Whether this build runs flagos on the cpu accelerator (virtual devices over host memory)
    rather than on a device whose runtime, pool and graphs are torch.cuda's."""
    return _C._native_device_type() == "cpu"


def is_available() -> bool:
    return device_count() > 0


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    _lazy_init()  # as torch.cuda.current_device: asking for the device is using the runtime
    return _C._current_device()


def set_device(device: DeviceLike) -> None:
    """Makes `device` current; a negative int does nothing, as with torch.cuda.set_device."""
    if isinstance(device, int) and device < 0:
        return
    as_device = torch.device(device) if isinstance(device, str) else device
    unindexed = isinstance(as_device, torch.device) and as_device.type == _NAME
    if device is None or (unindexed and as_device.index is None):
        # torch.cuda.set_device's words: "the current device" is no choice of device.
        raise ValueError(
            f"Expected a torch.device with a specified index or an integer, but got:{device}"
        )
    index = device_index(device)  # a flagos device's index from here on
    _lazy_init()  # as torch.cuda.set_device: choosing a device is using the runtime
    _C._set_device(index)


def synchronize(device: DeviceLike = None) -> None:
    """Waits for all work on the device to finish."""
    _C._synchronize(device_index(device))


def _is_in_bad_fork() -> bool:
    """True in a process forked after its parent started the device runtime (CUDA cannot be
    used there): flagos itself started it, or torch.cuda did on the cuda accelerator."""
    if _C._is_in_bad_fork():
        return True
    if _C._native_device_type() == "cuda":
        return bool(getattr(torch._C, "_cuda_isInBadFork", lambda: False)())
    return False


# Whether this process has used the device (made a tensor on it, chose a device, called init),
# as torch.cuda.is_initialized tells: torch asks it to decide whether a device is still free to
# choose (DeviceMesh picks LOCAL_RANK's device only for a process that has not used one yet).
# Only ever set, to True; a plain bool is enough across threads.
_initialized = False


def is_initialized() -> bool:
    return _initialized and not _is_in_bad_fork()


def init() -> None:
    """Marks the device as in use (torch.cuda.init's counterpart); it needs no other setup."""
    _lazy_init()


def _lazy_init() -> None:
    """torch calls this before the first factory call or `.to()` naming a flagos device (as
    torch.cuda._lazy_init); without it torch looks it up again on every such call. The device
    needs no initialization beyond being marked in use; a process forked after its parent
    started the device runtime gets the error torch.cuda gives there, before any tensor is
    made. On the cuda accelerator flagos:N is cuda:N, so torch.cuda is initialized too: its
    memory statistics and snapshots count flagos tensors from the first one."""
    global _initialized
    if _is_in_bad_fork():
        raise RuntimeError(
            "Cannot initialize flagos in a process forked after its parent started the device "
            "runtime. Start worker processes with the 'spawn' or 'forkserver' method "
            "(multiprocessing.set_start_method('spawn'))."
        )
    if not _initialized and _C._native_device_type() == "cuda":
        torch.cuda._lazy_init()
    _initialized = True


def can_device_access_peer(device: DeviceLike, peer_device: DeviceLike) -> bool:
    """Whether `device` can read `peer_device`'s memory directly (cpu accelerator: all flagos
    devices share host memory; cuda accelerator: CUDA's answer for the same indices)."""
    index, peer = (
        _C._resolve_device_index(device_index(d, optional=False, current_ok=False))
        for d in (device, peer_device)
    )
    if _C._native_device_type() == "cuda":
        return bool(torch.cuda.can_device_access_peer(index, peer))
    return True


class device:
    """Context manager that makes `device` current and restores the previous one (a negative
    int: does nothing, as torch.cuda.device)."""

    def __init__(self, device: DeviceLike) -> None:
        self.idx = -1 if isinstance(device, int) and device < 0 else device_index(device)
        self.prev_idx = -1

    def __enter__(self) -> None:
        self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *exc: object) -> bool:
        if self.prev_idx >= 0:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of `obj` (a tensor) current."""

    def __init__(self, obj: torch.Tensor) -> None:
        super().__init__(obj.get_device() if obj.device.type == _NAME else -1)
