"""What a flagos device is: name, memory, capability, supported dtypes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from torch_fl import _C
from torch_fl.flagos._device import DeviceLike, device_index


@dataclass(frozen=True)
class DeviceProperties:
    """A cpu-accelerator device as torch.cuda describes a GPU (every field CUDA's record has, so
    code reading one runs): host memory and the host's cores, no GPU cache or clocks to report."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    is_integrated: int = 1  # host memory
    is_multi_gpu_board: int = 0
    max_threads_per_multi_processor: int = 1
    gcnArchName: str = ""  # noqa: N815 (CUDA's field name)
    warp_size: int = 1
    uuid: str = ""
    L2_cache_size: int = 0  # noqa: N815 (CUDA's field name)
    clock_rate: int = 0
    memory_clock_rate: int = 0
    memory_bus_width: int = 0
    shared_memory_per_block: int = 0
    shared_memory_per_multiprocessor: int = 0


def get_device_properties(device: DeviceLike = None) -> Any:
    """The device's properties. On a device accelerator flagos:N is the native device N, whose
    own record (torch.cuda's, every field) this returns; on the cpu accelerator, a
    DeviceProperties."""
    index = device_index(device, current_ok=False)
    if _C._native_device_type() == "cuda":
        return torch.cuda.get_device_properties(index)
    return DeviceProperties(**_C._device_properties(index))


def get_device_name(device: DeviceLike = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: DeviceLike = None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


def get_amp_supported_dtype() -> list[torch.dtype]:
    # float32 too: torch.autocast("cuda", dtype=torch.float32) is a valid (fp32-policy) autocast,
    # which torch would otherwise disable for flagos with a warning.
    return [torch.float16, torch.bfloat16, torch.float32]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True
