"""The `flagos` c10d backend as installed: it loads from the torch_fl package, and a world-size-1
flagos group resolves its inner backend to the tier this build should reach and completes a
collective.

On a CUDA-ABI build (the H200; DCU) that tier is NCCL over zero-copy CUDA views, with no FlagCX
skip reason (flagcx is not installed) and no reason recorded for skipping NCCL in favour of
host-staged gloo. On the cpu accelerator (CI) it is gloo, zero-copy over host memory.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import torch_fl
from torch_fl import comm

CUDA_ABI = torch_fl.build_config.ACCELERATOR in ("cuda", "dcu")
FLAGCX_IMPORTABLE = importlib.util.find_spec("flagcx") is not None


@pytest.fixture
def group(monkeypatch):
    monkeypatch.delenv(comm.ENV_TIER, raising=False)
    monkeypatch.delenv(comm.ENV_HOST_STAGED, raising=False)
    dist.init_process_group("flagos", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_backend_loads_from_the_installed_package() -> None:
    package = Path(torch_fl.__file__).resolve().parent
    assert Path(torch_fl._C.__file__).resolve().parent == package
    cls = comm.ProcessGroupFlagOS
    assert cls.__module__ == "torch_fl._C._comm"
    assert issubclass(cls, torch._C._distributed_c10d.Backend)
    assert "flagos" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map.get("flagos") == "flagos"
    assert dist.Backend.backend_capability["flagos"] == ["flagos"]
    if hasattr(dist, "get_default_backend_for_device"):
        assert dist.get_default_backend_for_device("flagos") == "flagos"


def test_world_size_1_group_resolves_its_tier_and_completes_a_collective(group) -> None:
    backend = comm.backend_of(group)
    info = comm.tier_info(group)
    if CUDA_ABI:
        assert info.tier == "nccl", info
        assert backend.inner_name == "nccl"
        assert info.path == "zero_copy"
        if not FLAGCX_IMPORTABLE:
            assert "flagcx" not in info.skip_reasons, info
        # nothing pushed the group down to host-staged gloo
        assert "nccl" not in info.skip_reasons, info
        assert "gloo" not in info.skip_reasons, info
    else:
        assert info.tier == "gloo", info
        assert backend.inner_name == "gloo"
        assert info.path == "zero_copy"
        assert "nccl" in info.unavailable
    if FLAGCX_IMPORTABLE:
        assert "not implemented in this build" in info.skip_reasons["flagcx"]
    else:
        assert "flagcx" in info.unavailable

    t = torch.arange(1024, dtype=torch.float32, device="flagos")
    expected = t.cpu() * 1
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    torch.flagos.synchronize()
    assert t.device.type == "flagos"
    torch.testing.assert_close(t.cpu(), expected)
    out = torch.empty(1024, device="flagos")
    dist.all_gather_into_tensor(out, t)
    torch.testing.assert_close(out.cpu(), expected)
