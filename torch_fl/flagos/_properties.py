"""What a flagos device is: name, memory, capability, supported dtypes."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torch_fl import _C
from torch_fl.flagos._device import DeviceLike, device_index


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int


def get_device_properties(device: DeviceLike = None) -> DeviceProperties:
    return DeviceProperties(**_C._device_properties(device_index(device, current_ok=False)))


def get_device_name(device: DeviceLike = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: DeviceLike = None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
