"""Zero-copy views between flagos tensors and the native device's (CUDA on the cuda accelerator,
CPU on the cpu one), for kernels of your own: a custom operator's flagos implementation can run
vendor kernels on `native_view(x)` and hand results back with `flagos_view(y)`.

Both share memory and never copy. A view carries its own autograd and version state: a write
through `native_view(x)` does not bump `x._version`, so a custom operator that writes its
arguments declares them in `mutates_args` (torch then bumps the versions), and a tensor that
needs gradients is viewed inside such an operator, not around autograd.
"""

from __future__ import annotations

import torch

from torch_fl import _C

__all__ = ["flagos_view", "native_view"]


def native_view(tensor: torch.Tensor) -> torch.Tensor:
    """A native-device tensor over `tensor`'s memory (same sizes, strides, offset and dtype).
    Raises for a tensor that is not on flagos."""
    return _C._flagos_to_native_view(tensor)


def flagos_view(
    tensor: torch.Tensor, device: torch.device | str | int | None = None
) -> torch.Tensor:
    """A flagos tensor over a native tensor's memory. Its device is the one that memory belongs
    to: flagos:N for a cuda:N tensor, the flagos tensor's own device for a `native_view` of
    it, else `device` (a flagos device or index; default the current flagos device). Naming
    another device than the memory's is an error. The memory stays the native tensor's: it
    lives as long as either tensor does. Raises for a tensor not on the native device."""
    index = -1
    if device is not None:
        if isinstance(device, int):
            device = torch.device("flagos", device)
        device = torch.device(device)
        if device.type != "flagos":
            raise ValueError(f"flagos_view: device must be a flagos device, not {device}")
        if device.index is not None:
            index = device.index
    if tensor.device.index is not None:  # cuda:N memory is flagos:N memory
        if index not in (-1, tensor.device.index):
            raise ValueError(
                f"flagos_view: the memory of a {tensor.device} tensor is flagos:"
                f"{tensor.device.index} memory, not flagos:{index}"
            )
        index = tensor.device.index
    result = _C._native_to_flagos_view(tensor, index)
    if index != -1 and result.device.index != index:
        raise ValueError(
            f"flagos_view: this tensor is a view of {result.device} memory, not flagos:{index}"
        )
    return result
