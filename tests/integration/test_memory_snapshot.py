"""torch.flagos.memory_snapshot and torch.flagos.memory._snapshot / _dump_snapshot /
_record_memory_history, in torch.cuda's snapshot format.

The cpu accelerator lists its own pool (blocks in use, cached blocks, results adopted from native
kernels); its totals must equal the allocator's statistics. On the cuda accelerator (marker
`gpu`) flagos memory is the CUDA pool's and these are torch.cuda's, which must show flagos
tensors and their allocation stacks.
"""

from __future__ import annotations

import gc
import pickle

import pytest
import torch
from torch.cuda import _memory_viz

import torch_fl

ON_CPU = torch_fl._C._native_device_type() == "cpu"
cpu_only = pytest.mark.skipif(not ON_CPU, reason="the cpu accelerator's own pool")


@pytest.fixture(autouse=True)
def _empty_cache():
    gc.collect()
    torch.flagos.synchronize()
    torch.flagos.empty_cache()
    yield
    gc.collect()
    torch.flagos.empty_cache()


def _segments(device: int) -> list[dict]:
    return [s for s in torch.flagos.memory_snapshot() if s["device"] == device]


def _block_at(address: int) -> dict | None:
    for segment in torch.flagos.memory_snapshot():
        for block in segment["blocks"]:
            if block["address"] <= address < block["address"] + block["size"]:
                return block
    return None


@cpu_only
@pytest.mark.parametrize("device", [0, 1])
def test_snapshot_totals_equal_the_statistics(device: int, two_devices) -> None:
    keep = [
        torch.empty(1000, device=f"flagos:{device}"),  # the flagos allocator's own block
        torch.randn(300, 7).to(f"flagos:{device}") * 2,  # a kernel's result, adopted
        torch.empty(3 << 20, dtype=torch.uint8, device=f"flagos:{device}"),  # a large segment
    ]
    dropped = torch.empty(5000, device=f"flagos:{device}")
    del dropped  # cached, not in use
    segments = _segments(device)
    allocated = sum(s["allocated_size"] for s in segments)
    reserved = sum(s["total_size"] for s in segments)
    assert allocated == torch.flagos.memory_allocated(device)
    assert reserved == torch.flagos.memory_reserved(device)
    assert {s["segment_type"] for s in segments} == {"small", "large"}
    assert any(s["adopted"] for s in segments)
    for t in keep:
        block = _block_at(t.data_ptr())
        assert block is not None and block["state"] == "active_allocated"
        assert block["size"] >= t.nbytes and block["requested_size"] >= t.nbytes
    assert any(s["blocks"][0]["state"] == "inactive" for s in segments)


@cpu_only
def test_freed_and_emptied_memory_leaves_the_snapshot() -> None:
    t = torch.randn(64, 64).to("flagos").mul(3)  # adopted
    own = torch.empty(4096, device="flagos")
    address, own_address = t.data_ptr(), own.data_ptr()
    del t  # an adopted allocation goes back to its native allocator at once
    assert _block_at(address) is None or _block_at(address)["state"] != "active_allocated"
    del own  # an own block stays cached until empty_cache
    assert _block_at(own_address)["state"] == "inactive"
    torch.flagos.empty_cache()
    assert _block_at(own_address) is None


@cpu_only
def test_snapshot_is_what_torch_memory_tools_read(tmp_path) -> None:
    keep = torch.empty(1 << 18, device="flagos")  # noqa: F841 (in use during the snapshot)
    snapshot = torch.flagos.memory._snapshot()
    assert len(snapshot["device_traces"]) == torch.flagos.device_count()
    summary = _memory_viz.segsum(snapshot)
    assert "total_allocated" in summary
    path = tmp_path / "flagos.pickle"
    torch.flagos.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        assert pickle.load(f)["segments"] == snapshot["segments"]


@cpu_only
def test_cpu_accelerator_refuses_history_and_pool_arguments() -> None:
    with pytest.raises(NotImplementedError, match="records no allocation history"):
        torch.flagos.memory._record_memory_history()
    torch.flagos.memory._record_memory_history(enabled=None)  # stopping is no error, as on cuda
    with pytest.raises(ValueError, match="has no private memory pools"):
        torch.flagos.memory_snapshot((0, 1))


@cpu_only
def test_snapshot_takes_torch_cudas_arguments() -> None:
    # torch.cuda.memory_snapshot(mempool_id=None, include_traces=True): the same calls work.
    x = torch.empty(1000, device="flagos")
    plain = torch.flagos.memory_snapshot()
    assert torch.flagos.memory_snapshot(None) == plain
    assert torch.flagos.memory_snapshot(include_traces=False) == plain
    assert torch.flagos.memory_snapshot(mempool_id=None, include_traces=True) == plain
    del x


@pytest.mark.gpu
@pytest.mark.skipif(ON_CPU, reason="needs a device accelerator")
def test_device_snapshot_shows_flagos_tensors_and_their_stacks() -> None:
    torch.flagos.memory._record_memory_history(max_entries=1000)
    try:
        x = torch.empty(1 << 20, device="flagos")
        y = torch.randn(256, 256, device="flagos") @ torch.randn(256, 256, device="flagos")
        snapshot = torch.flagos.memory._snapshot()
    finally:
        torch.flagos.memory._record_memory_history(None)
    for t in (x, y):
        block = _block_at(t.data_ptr())
        assert block is not None and block["state"] == "active_allocated"
    allocs = [
        e
        for trace in snapshot["device_traces"]
        for e in trace
        if e["action"] == "alloc" and e["addr"] == x.data_ptr()
    ]
    assert allocs, "the flagos allocation is in the history"
    frames = allocs[-1]["frames"]
    assert any(f["filename"].endswith("test_memory_snapshot.py") for f in frames)
