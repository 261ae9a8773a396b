"""DLPack capsules round-trip flagos tensors without a copy (README, "DLPack")."""

from __future__ import annotations

import torch
from torch.utils import dlpack

import torch_fl  # noqa: F401


def test_a_capsule_round_trips_a_flagos_tensor_without_a_copy() -> None:
    x = torch.arange(12.0).reshape(3, 4).to("flagos").t()  # strided
    back = dlpack.from_dlpack(dlpack.to_dlpack(x))
    assert back.device == x.device
    assert back.data_ptr() == x.data_ptr()
    assert back.stride() == x.stride()
    back.mul_(2)  # shared memory: the original sees the write
    torch.testing.assert_close(x.cpu(), torch.arange(12.0).reshape(3, 4).t() * 2)


def test_torch_from_dlpack_shares_memory_or_names_the_device() -> None:
    # torch's Python protocol does not know a renamed PrivateUse1 backend (torch 2.10-2.13):
    # it must fail naming the device, never hand back a copy.
    x = torch.ones(2, device="flagos")
    try:
        y = torch.from_dlpack(x)
    except ValueError as exc:
        assert "flagos" in str(exc)
        return
    assert y.device == x.device and y.data_ptr() == x.data_ptr()
