"""The flagos device as Dynamo and Inductor see it: a DeviceInterface backed by torch.flagos.

Registered with `torch._dynamo.device_interface.register_interface_for_device("flagos", ...)`
by `torch_fl.compile.register()`. Inductor asks it for device properties (reduction split
heuristics, Triton targets), the current device and stream, and synchronization.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import (
    DeviceInterface,
    caching_worker_current_devices,
    caching_worker_device_properties,
)

from torch_fl import _C
from torch_fl import flagos as _flagos
from torch_fl.compile import _runtime

_NAME = "flagos"


def _index(device: torch.types.Device) -> int:
    """None/int/str/torch.device -> a flagos device index (the current one for None)."""
    if device is None:
        return _flagos.current_device()
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if device.type != _NAME:
        raise ValueError(f"Expected a flagos device, got {device}")
    return _flagos.current_device() if device.index is None else device.index


def _properties(index: int) -> Any:
    """What Inductor reads from a device's properties.

    On a CUDA-ABI accelerator flagos:N is native device N, so its native properties (SM count,
    registers per SM, warp size, ...) are the truth; on the cpu accelerator flagos's own
    properties carry the core count as multi_processor_count.
    """
    if _runtime.NATIVE_DEVICE_TYPE == "cuda":
        return torch.cuda.get_device_properties(index)
    return _flagos.get_device_properties(index)


class FlagosInterface(DeviceInterface):
    device = _flagos.device  # type: ignore[assignment]
    Event = _flagos.Event  # type: ignore[assignment]
    Stream = _flagos.Stream  # type: ignore[assignment]

    class Worker:
        """Device queries that work in compile workers from values recorded in the parent."""

        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices[_NAME] = device

        @staticmethod
        def current_device() -> int:
            if _NAME in caching_worker_current_devices:
                return caching_worker_current_devices[_NAME]
            return _flagos.current_device()

        @staticmethod
        def get_device_properties(device: torch.types.Device = None) -> Any:
            if device is None:
                index = FlagosInterface.Worker.current_device()
            else:
                index = _index(device)
            if _NAME not in caching_worker_device_properties:
                caching_worker_device_properties[_NAME] = [
                    _properties(i) for i in range(_flagos.device_count())
                ]
            return caching_worker_device_properties[_NAME][index]

    @staticmethod
    def current_device() -> int:
        return _flagos.current_device()

    @staticmethod
    def set_device(device: torch.types.Device) -> None:
        _flagos.set_device(device)

    @staticmethod
    def exchange_device(device: int) -> int:
        return _C._exchange_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        if device < 0:
            return -1
        return _C._exchange_device(device)

    @staticmethod
    def device_count() -> int:
        return _flagos.device_count()

    @staticmethod
    def is_available() -> bool:
        return _flagos.is_available()

    @staticmethod
    def stream(stream: torch.Stream) -> Any:
        return _flagos.stream(stream)

    @staticmethod
    def current_stream() -> torch.Stream:
        return _flagos.current_stream()

    @staticmethod
    def set_stream(stream: torch.Stream) -> None:
        _flagos.set_stream(stream)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _flagos.set_stream(
            torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)
        )

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return _runtime.get_raw_stream(device_idx)

    @staticmethod
    def synchronize(device: torch.types.Device = None) -> None:
        _flagos.synchronize(device)

    @staticmethod
    def get_device_properties(device: torch.types.Device = None) -> Any:
        return _properties(_index(device))

    @staticmethod
    def get_compute_capability(device: torch.types.Device = None) -> Any:
        if _runtime.NATIVE_DEVICE_TYPE == "cuda":
            index = _index(device)
            if torch.version.hip is not None:
                return torch.cuda.get_device_properties(index).gcnArchName.split(":", 1)[0]
            major, minor = torch.cuda.get_device_capability(index)
            return major * 10 + minor
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return _flagos.is_bf16_supported(including_emulation)

    @staticmethod
    def memory_allocated(device: torch.types.Device = None) -> int:
        return _flagos.memory_allocated(device)

    @staticmethod
    def is_triton_capable(device: torch.types.Device = None) -> bool:
        # Inductor generates Triton for flagos only where flagos memory is GPU memory.
        return _runtime.NATIVE_DEVICE_TYPE == "cuda"

    @staticmethod
    def raise_if_triton_unavailable(device: torch.types.Device = None) -> None:
        if not FlagosInterface.is_triton_capable(device):
            raise RuntimeError(
                "torch.compile on flagos uses Inductor's C++ code generation on the "
                f"'{_runtime.ACCELERATOR}' accelerator, not Triton"
            )
        import triton.backends

        wanted = "amd" if torch.version.hip is not None else "nvidia"
        if wanted not in triton.backends.backends and not _runtime.flagtree_backend():
            raise RuntimeError(f"triton is not built with the '{wanted}' backend")
