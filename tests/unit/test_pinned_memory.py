"""Pinned host memory for flagos transfers: pin_memory, is_pinned, DataLoader(pin_memory=True)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset


def test_pin_memory_copies_into_pinned_memory() -> None:
    src = torch.randn(16, 8)
    assert not src.is_pinned()
    pinned = src.pin_memory()
    assert pinned.is_pinned()
    assert pinned.device.type == "cpu"
    assert pinned.data_ptr() != src.data_ptr()
    assert torch.equal(pinned, src)
    assert pinned.pin_memory() is pinned  # already pinned: no copy


def test_is_pinned_for_views() -> None:
    pinned = torch.arange(100.0).pin_memory()
    assert pinned[10:20].is_pinned()
    assert pinned.view(10, 10).t().is_pinned()
    assert not torch.arange(100.0)[10:20].is_pinned()


def test_pinned_factories() -> None:
    for t in (
        torch.empty(4, pin_memory=True),
        torch.zeros(4, pin_memory=True),
        torch.empty_like(torch.ones(3), pin_memory=True),
        torch.ones(2, 3, pin_memory=True),
    ):
        assert t.is_pinned() and t.device.type == "cpu"
    assert torch.equal(torch.zeros(4, pin_memory=True), torch.zeros(4))


def test_pinned_factories_read_as_pinned_in_a_fresh_process() -> None:
    # On a CUDA build torch pins factory tensors through CUDA's hooks, which never marked flagos
    # (the current accelerator, which is_pinned() asks) as started: they read as unpinned until
    # some flagos pinning happened. Asking about a plain cpu tensor must not start CUDA.
    script = """
import torch, torch_fl
plain = torch.randn(3).is_pinned()
native = torch_fl._C._native_device_type()
started = native == "cuda" and torch._C._cuda_hasPrimaryContext(0)
made = [torch.empty(4, pin_memory=True), torch.zeros(4, pin_memory=True),
        torch.empty_like(torch.ones(3), pin_memory=True)]
print(plain, started, [t.is_pinned() for t in made])
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "False False [True, True, True]", done.stdout


def test_pinned_memory_freed_is_no_longer_pinned_address() -> None:
    pinned = torch.empty(1 << 16).pin_memory()
    pinned.fill_(1)
    addr_view = pinned[5:]
    del pinned
    assert addr_view.is_pinned()  # storage kept alive by the view
    assert float(addr_view.sum()) == (1 << 16) - 5


@pytest.mark.parametrize("non_blocking", [True, False])
def test_pinned_to_flagos_and_back(non_blocking: bool) -> None:
    src = torch.randn(32, 32)
    pinned = src.pin_memory()
    on = pinned.to("flagos", non_blocking=non_blocking)
    assert on.device == torch.device("flagos", 0)
    out = torch.empty(32, 32, pin_memory=True)
    out.copy_(on * 2, non_blocking=non_blocking)
    torch.flagos.synchronize()
    torch.testing.assert_close(out, src * 2)


def test_dataloader_pin_memory_then_non_blocking_transfer() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 5, generator=g)
    y = torch.randint(0, 3, (40,), generator=g)
    loader = DataLoader(TensorDataset(x, y), batch_size=8, pin_memory=True, shuffle=False)
    seen_x, seen_y = [], []
    for bx, by in loader:
        assert bx.is_pinned() and by.is_pinned()
        dx = bx.to("flagos", non_blocking=True)
        dy = by.to("flagos", non_blocking=True)
        assert dx.device.type == "flagos" and dy.device.type == "flagos"
        seen_x.append((dx * 1).cpu())
        seen_y.append(dy.cpu())
    torch.flagos.synchronize()
    assert torch.equal(torch.cat(seen_x), x)
    assert torch.equal(torch.cat(seen_y), y)


def test_flagos_tensor_cannot_be_pinned() -> None:
    t = torch.ones(3, device="flagos")
    with pytest.raises(RuntimeError):
        t.pin_memory()
    with pytest.raises(RuntimeError, match="pinned"):
        torch.empty(3, device="flagos", pin_memory=True)


def test_dataloader_with_workers_and_pin_memory() -> None:
    data = torch.arange(40.0).reshape(20, 2)
    loader = DataLoader(TensorDataset(data), batch_size=3, num_workers=2, pin_memory=True)
    moved = []
    for (batch,) in loader:
        assert batch.is_pinned()
        moved.append(batch.to("flagos", non_blocking=True))
    torch.flagos.synchronize()
    assert all(m.device.type == "flagos" for m in moved)
    assert torch.equal(torch.cat(moved).cpu(), data)


def test_host_memory_stats_follow_pinned_tensors() -> None:
    # Settle a caching pool first: it retires blocks whose copies have finished lazily, on the
    # next allocation, which would otherwise show up inside the measurement.
    gc.collect()
    torch.flagos.synchronize()
    torch.flagos.empty_host_cache()
    torch.flagos.reset_peak_host_memory_stats()
    before = torch.flagos.host_memory_stats()
    pinned = torch.empty(4096, dtype=torch.uint8).pin_memory()
    during = torch.flagos.host_memory_stats()
    # A caching pool (CUDA's) may serve the request from a cached block, so only the active
    # counts must grow; the pool's blocks include it either way.
    assert during["active_requests.current"] - before["active_requests.current"] >= 1
    assert during["active_bytes.current"] - before["active_bytes.current"] >= 4096
    assert during["allocated_bytes.peak"] >= during["allocated_bytes.current"]
    del pinned
    torch.flagos.empty_host_cache()  # returns what a caching pool kept
    after = torch.flagos.host_memory_stats()
    assert after["allocated_bytes.current"] <= during["allocated_bytes.current"] - 4096
    assert after["num_host_free"] > during["num_host_free"]
    torch.flagos.reset_accumulated_host_memory_stats()
    assert torch.flagos.host_memory_stats()["num_host_alloc"] == 0


def test_host_memory_stats_time_the_allocators_system_calls() -> None:
    # torch.cuda.host_memory_stats's timing keys: one host_alloc_time sample per block taken
    # from the system, one host_free_time sample per block given back; resets as CUDA's.
    timing = [
        f"{kind}.{field}"
        for kind in ("host_alloc_time", "host_free_time")
        for field in ("total", "max", "min", "count", "avg")
    ]
    gc.collect()
    torch.flagos.synchronize()
    torch.flagos.empty_host_cache()
    # From zero: a sum reset alone (an earlier test) leaves the old max above the new total.
    torch.flagos.reset_accumulated_host_memory_stats()
    torch.flagos.reset_peak_host_memory_stats()
    before = torch.flagos.host_memory_stats()
    assert set(timing) <= set(before)
    pinned = torch.empty(1 << 20, dtype=torch.uint8).pin_memory()
    during = torch.flagos.host_memory_stats()
    new_blocks = during["num_host_alloc"] - before["num_host_alloc"]
    assert during["host_alloc_time.count"] - before["host_alloc_time.count"] == new_blocks
    if during["host_alloc_time.count"]:
        stat = {field: during[f"host_alloc_time.{field}"] for field in ("total", "max", "min")}
        assert 0 <= stat["min"] <= stat["max"] <= stat["total"]
        assert during["host_alloc_time.avg"] == stat["total"] // during["host_alloc_time.count"]
    del pinned
    torch.flagos.empty_host_cache()
    after = torch.flagos.host_memory_stats()
    freed = after["num_host_free"] - during["num_host_free"]
    assert freed >= 1
    assert after["host_free_time.count"] - during["host_free_time.count"] == freed
    torch.flagos.reset_accumulated_host_memory_stats()
    reset = torch.flagos.host_memory_stats()
    assert reset["host_alloc_time.count"] == reset["host_alloc_time.total"] == 0
    assert reset["host_free_time.count"] == reset["host_free_time.total"] == 0
    torch.flagos.reset_peak_host_memory_stats()
    assert torch.flagos.host_memory_stats()["host_alloc_time.max"] == 0


@pytest.mark.skipif(
    not hasattr(torch.accelerator, "empty_host_cache"),
    reason="torch.accelerator has no empty_host_cache",
)
def test_empty_host_cache_after_device_use() -> None:
    # torch.accelerator.empty_host_cache() reads PrivateUse1's entry in ATen's host-allocator
    # registry once the device is in use; an unregistered entry crashed the process.
    code = (
        "import torch, torch_fl\n"
        "x = torch.ones(4, device='flagos') + 1\n"
        "p = torch.ones(8).pin_memory()\n"
        "torch.accelerator.empty_host_cache()\n"
        "print(x.sum().item(), p.is_pinned())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["8.0", "True"]
