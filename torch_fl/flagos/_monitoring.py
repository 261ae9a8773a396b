"""What the driver reports about a device (nvidia-smi's figures), as torch.cuda reports them.

flagos:N is the native device N on a device accelerator, so these are torch.cuda's answers for
it. The cpu accelerator's devices are virtual devices over host memory, with no sensors or
driver to ask: there every function here raises, saying so.
"""

from __future__ import annotations

from typing import Any

import torch

from torch_fl.flagos._device import DeviceLike, device_index, on_cpu_accelerator


def _driver_query(name: str, device: DeviceLike) -> Any:
    """torch.cuda.<name> for the same device on a device accelerator; on the cpu accelerator a
    RuntimeError naming the query."""
    if on_cpu_accelerator():
        raise RuntimeError(
            f"torch.flagos.{name}: the cpu accelerator's devices are virtual devices over host "
            "memory, with no driver or sensors to query; this works on the cuda accelerator."
        )
    return getattr(torch.cuda, name)(device_index(device))


def device_memory_used(device: DeviceLike = None) -> int:
    """Bytes of device memory in use, all processes together (nvidia-smi's figure)."""
    return _driver_query("device_memory_used", device)


def memory_usage(device: DeviceLike = None) -> int:
    """Percent of the last sample period during which device memory was read or written."""
    return _driver_query("memory_usage", device)


def utilization(device: DeviceLike = None) -> int:
    """Percent of the last sample period during which a kernel ran on the device."""
    return _driver_query("utilization", device)


def temperature(device: DeviceLike = None) -> int:
    """The device's sensor temperature in degrees Celsius."""
    return _driver_query("temperature", device)


def power_draw(device: DeviceLike = None) -> int:
    """The device's average power draw in milliwatts."""
    return _driver_query("power_draw", device)


def clock_rate(device: DeviceLike = None) -> int:
    """The device's SM clock in MHz."""
    return _driver_query("clock_rate", device)


def list_gpu_processes(device: DeviceLike = None) -> str:
    """The processes using the device and their memory, printable."""
    return _driver_query("list_gpu_processes", device)


# The cpu accelerator's sync debug mode: kept so get_sync_debug_mode() answers what was set; it
# never fires there, as nothing waits for a device. One int, read and written whole.
_cpu_sync_debug_mode = 0

_SYNC_DEBUG_MODES = {"default": 0, "warn": 1, "error": 2}


def get_sync_debug_mode() -> int:
    """0, 1 (warn) or 2 (error) on host synchronisations, as set by set_sync_debug_mode."""
    if on_cpu_accelerator():
        return _cpu_sync_debug_mode
    return torch.cuda.get_sync_debug_mode()


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Warn about (1, "warn") or refuse (2, "error") operations that wait for the device, as
    torch.cuda.set_sync_debug_mode: flagos waits are CUDA's, so flagos operations report too.
    The cpu accelerator takes the same values and keeps the mode, but runs every operator on the
    host when it is called, so nothing there waits for a device to warn about."""
    if not on_cpu_accelerator():
        torch.cuda.set_sync_debug_mode(debug_mode)
        return
    global _cpu_sync_debug_mode
    if isinstance(debug_mode, str):
        if debug_mode not in _SYNC_DEBUG_MODES:
            raise RuntimeError(
                "invalid value of debug_mode, expected one of `default`, `warn`, `error`"
            )
        debug_mode = _SYNC_DEBUG_MODES[debug_mode]
    if debug_mode not in (0, 1, 2):
        raise RuntimeError(f"invalid value of debug_mode {debug_mode!r}, expected 0, 1 or 2")
    _cpu_sync_debug_mode = int(debug_mode)


def is_tf32_supported() -> bool:
    """Whether matmuls can run in TF32 on the device (never on the cpu accelerator)."""
    if on_cpu_accelerator():
        return False
    return torch.cuda.is_tf32_supported()
