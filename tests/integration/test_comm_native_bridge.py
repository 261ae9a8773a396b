"""The `flagos` c10d backend as installed: it loads from the torch_fl package, and a world-size-1
flagos group resolves its inner backend to the tier this build should reach and completes a
collective.

On a CUDA-ABI build (the H200; DCU) that tier is NCCL over zero-copy CUDA views, with no FlagCX
skip reason (flagcx is not installed) and no reason recorded for skipping NCCL in favour of
host-staged gloo. On the cpu accelerator (CI) it is gloo, zero-copy over host memory.

The NCCL bridge (torch_fl.comm._nccl_ext._flagos_nccl) builds torch's ProcessGroupNCCL from C++
where the installed torch's Python has no ProcessGroupNCCL class (DCU's CPU-only torch front);
on the H200, where the class exists, its tests make the tier take the bridge instead.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import torch_fl
from torch_fl import comm
from torch_fl.comm import process_group

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


requires_bridge = pytest.mark.skipif(
    process_group.nccl_bridge()[0] is None, reason="this package carries no NCCL bridge"
)


@pytest.mark.skipif(CUDA_ABI, reason="a CUDA-ABI build carries the bridge where NCCL is found")
def test_a_cpu_build_carries_no_bridge_and_says_how_it_is_built() -> None:
    bridge, why_not = process_group.nccl_bridge()
    assert bridge is None
    assert process_group.NCCL_BRIDGE in why_not and "NCCL_INCLUDE_DIR" in why_not


@requires_bridge
def test_the_bridge_loads_from_the_installed_package_and_reports_nccl() -> None:
    bridge, _ = process_group.nccl_bridge()
    package = Path(torch_fl.__file__).resolve().parent
    assert Path(bridge.__file__).resolve().parent == package / "comm" / "_nccl_ext"
    if torch.version.cuda is not None:
        version = ".".join(map(str, torch.cuda.nccl.version()[:3]))
        assert bridge.nccl_version().startswith(version), (bridge.nccl_version(), version)


@requires_bridge
def test_a_group_over_the_bridge_runs_collectives(monkeypatch) -> None:
    # As on DCU: the installed torch's Python has no ProcessGroupNCCL, so the tier takes the
    # bridge's.
    monkeypatch.setattr(process_group, "torch_nccl_class", lambda: None)
    monkeypatch.delenv(comm.ENV_TIER, raising=False)
    dist.init_process_group("flagos", store=dist.HashStore(), rank=0, world_size=1)
    try:
        backend = comm.backend_of(dist.group.WORLD)
        info = comm.tier_info(dist.group.WORLD)
        assert info.tier == "nccl" and "nccl" not in info.skip_reasons, info
        assert backend.inner_name == "nccl"
        assert isinstance(backend.inner, torch._C._distributed_c10d.Backend)

        t = torch.randn(4096, device="flagos")
        expected = t.cpu() * 3
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(3.0))  # world size 1: t * 3
        torch.testing.assert_close(t.cpu(), expected)
        dist.all_reduce(t)
        torch.testing.assert_close(t.cpu(), expected)
        out = torch.empty(4096, device="flagos")
        dist.all_gather_into_tensor(out, t)
        torch.testing.assert_close(out.cpu(), expected)
        source = torch.arange(10, dtype=torch.int64, device="flagos")
        dist.broadcast(source, src=0)
        torch.testing.assert_close(source.cpu(), torch.arange(10))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not CUDA_ABI, reason="the nccl tier needs a CUDA-ABI build")
def test_without_torchs_class_or_a_bridge_the_nccl_tier_says_why(monkeypatch) -> None:
    monkeypatch.setattr(process_group, "torch_nccl_class", lambda: None)
    monkeypatch.setattr(process_group, "nccl_bridge", lambda: (None, "no bridge in this test"))
    state, reason = process_group._nccl_status("cuda_abi")
    assert state == "skipped"
    assert "ProcessGroupNCCL is absent" in reason and "no bridge in this test" in reason
