"""The flagos caching allocator: statistics per device, the cache, and torch.accelerator parity."""

from __future__ import annotations

import gc

import pytest
import torch

MB = 1 << 20


def _settle() -> None:
    gc.collect()
    torch.flagos.synchronize()


@pytest.fixture(autouse=True)
def _clean_cache():
    _settle()
    torch.flagos.empty_cache()
    yield
    _settle()
    torch.flagos.empty_cache()


def test_allocated_grows_and_shrinks_with_tensors() -> None:
    before = torch.flagos.memory_allocated()
    a = torch.empty(MB // 4, device="flagos")  # 1 MiB of float32
    after_a = torch.flagos.memory_allocated()
    assert after_a - before >= a.nbytes
    b = torch.empty(3 * MB // 4, device="flagos")
    assert torch.flagos.memory_allocated() - after_a >= b.nbytes
    del a
    assert torch.flagos.memory_allocated() < after_a + b.nbytes
    del b
    assert torch.flagos.memory_allocated() == before


def test_kernel_outputs_are_accounted() -> None:
    x = torch.ones(MB // 4, device="flagos")
    before = torch.flagos.memory_allocated()
    y = x * 2
    z = torch.cat([x, y])
    assert torch.flagos.memory_allocated() - before >= y.nbytes + z.nbytes
    del y, z
    assert torch.flagos.memory_allocated() == before


def test_reserved_covers_allocated_and_stays_cached_until_empty_cache() -> None:
    base_reserved = torch.flagos.memory_reserved()
    # Larger than all memory reserved but unused (segments that live blocks keep, such as a
    # device's per-stream BLAS workspaces), so it must come from a new segment.
    idle = base_reserved - torch.flagos.memory_allocated()
    t = torch.empty(2 * MB + idle, dtype=torch.uint8, device="flagos")
    assert torch.flagos.memory_reserved() >= torch.flagos.memory_allocated() >= t.nbytes
    reserved_with_t = torch.flagos.memory_reserved()
    assert reserved_with_t - base_reserved >= t.nbytes
    del t
    assert torch.flagos.memory_reserved() == reserved_with_t  # cached, not returned
    torch.flagos.empty_cache()
    assert torch.flagos.memory_reserved() == base_reserved


def test_cache_reuses_freed_block() -> None:
    t = torch.empty(MB, dtype=torch.uint8, device="flagos")
    ptr = t.data_ptr()
    stats = torch.flagos.memory_stats()
    del t
    u = torch.empty(MB, dtype=torch.uint8, device="flagos")
    after = torch.flagos.memory_stats()
    assert u.data_ptr() == ptr
    assert after["num_device_alloc"] == stats["num_device_alloc"]
    assert after["reserved_bytes.all.current"] == stats["reserved_bytes.all.current"]
    torch.flagos.empty_cache()  # a live block survives empty_cache
    assert torch.flagos.memory_reserved() >= u.nbytes
    u.fill_(7)
    assert int(u.sum()) == 7 * MB


def test_peak_statistics_and_reset() -> None:
    torch.flagos.reset_peak_memory_stats()
    base = torch.flagos.memory_allocated()
    assert torch.flagos.max_memory_allocated() == base
    big = torch.empty(4 * MB, dtype=torch.uint8, device="flagos")
    peak = torch.flagos.max_memory_allocated()
    assert peak >= base + big.nbytes
    assert torch.flagos.max_memory_reserved() >= torch.flagos.memory_reserved()
    del big
    assert torch.flagos.max_memory_allocated() == peak  # peaks outlive the tensor
    torch.flagos.reset_peak_memory_stats()
    assert torch.flagos.max_memory_allocated() == torch.flagos.memory_allocated() == base
    assert torch.flagos.max_memory_reserved() == torch.flagos.memory_reserved()


def test_memory_stats_keys_and_consistency() -> None:
    keep = torch.empty(1000, device="flagos")
    stats = torch.flagos.memory_stats()
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "reserved_bytes.all.current",
        "active_bytes.all.current",
        "requested_bytes.all.current",
        "allocation.all.current",
        "segment.all.current",
        "num_device_alloc",
        "num_device_free",
        "num_ooms",
    ):
        assert key in stats, key
        assert isinstance(stats[key], int)
    assert stats["allocated_bytes.all.current"] == torch.flagos.memory_allocated()
    assert stats["reserved_bytes.all.current"] == torch.flagos.memory_reserved()
    assert stats["allocated_bytes.all.peak"] == torch.flagos.max_memory_allocated()
    assert stats["reserved_bytes.all.peak"] == torch.flagos.max_memory_reserved()
    assert stats["allocation.all.current"] >= 1
    assert stats["requested_bytes.all.current"] >= keep.nbytes
    for kind in ("allocated_bytes", "reserved_bytes", "allocation"):
        pools = stats[f"{kind}.small_pool.current"] + stats[f"{kind}.large_pool.current"]
        assert pools == stats[f"{kind}.all.current"], kind
    assert list(stats) == sorted(stats)


def test_memory_stats_has_every_key_torch_reports() -> None:
    # torch.accelerator.memory_stats flattens the same allocator's statistics itself: code
    # written for torch.cuda.memory_stats (stats["num_sync_all_streams"], ...) finds its keys.
    keep = torch.empty(1000, device="flagos")
    ours = torch.flagos.memory_stats()
    torchs = torch.accelerator.memory_stats()
    assert set(torchs) <= set(ours), sorted(set(torchs) - set(ours))
    for key in ("num_sync_all_streams", "max_split_size", "oversize_allocations.current"):
        assert isinstance(ours[key], int)
    assert ours["allocated_bytes.all.current"] == torchs["allocated_bytes.all.current"]
    del keep


def test_small_and_large_pools() -> None:
    before = torch.flagos.memory_stats()
    small = torch.empty(1024, dtype=torch.uint8, device="flagos")
    large = torch.empty(4 * MB, dtype=torch.uint8, device="flagos")
    after = torch.flagos.memory_stats()
    small_delta = (
        after["allocated_bytes.small_pool.current"] - before["allocated_bytes.small_pool.current"]
    )
    large_delta = (
        after["allocated_bytes.large_pool.current"] - before["allocated_bytes.large_pool.current"]
    )
    assert small_delta >= small.nbytes and small_delta < MB
    assert large_delta >= large.nbytes


def test_memory_stats_counters_accumulate_and_reset() -> None:
    torch.flagos.reset_accumulated_memory_stats()
    stats = torch.flagos.memory_stats()
    assert stats["allocation.all.allocated"] == 0 and stats["allocation.all.freed"] == 0
    for _ in range(3):
        t = torch.empty(100, device="flagos")
        del t
    stats = torch.flagos.memory_stats()
    assert stats["allocation.all.allocated"] == 3
    assert stats["allocation.all.freed"] == 3


@pytest.mark.usefixtures("two_devices")
def test_devices_are_accounted_separately() -> None:
    before0 = torch.flagos.memory_allocated(0)
    before1 = torch.flagos.memory_allocated(1)
    t1 = torch.empty(MB, dtype=torch.uint8, device="flagos:1")
    assert torch.flagos.memory_allocated(0) == before0
    assert torch.flagos.memory_allocated(1) - before1 >= t1.nbytes
    assert torch.flagos.memory_allocated("flagos:1") == torch.flagos.memory_allocated(1)
    assert torch.flagos.memory_allocated(
        torch.device("flagos", 1)
    ) == torch.flagos.memory_allocated(1)
    with torch.flagos.device(1):
        assert torch.flagos.memory_allocated() == torch.flagos.memory_allocated(1)
    t0 = torch.empty(2 * MB, dtype=torch.uint8, device="flagos:0")
    assert torch.flagos.memory_allocated(1) - before1 < t0.nbytes
    torch.flagos.reset_peak_memory_stats(0)
    del t1
    assert torch.flagos.memory_allocated(1) == before1
    assert torch.flagos.max_memory_allocated(1) >= before1 + MB  # reset on 0 left 1 alone
    torch.flagos.empty_cache()
    assert torch.flagos.memory_reserved(1) < MB  # the empty_cache emptied flagos:1 too
    del t0


@pytest.mark.usefixtures("two_devices")
def test_freed_block_goes_back_to_its_own_device() -> None:
    t = torch.empty(MB, dtype=torch.uint8, device="flagos:1")
    ptr = t.data_ptr()
    del t
    u0 = torch.empty(MB, dtype=torch.uint8, device="flagos:0")
    assert u0.data_ptr() != ptr  # flagos:1's cache is not handed to flagos:0
    u1 = torch.empty(MB, dtype=torch.uint8, device="flagos:1")
    assert u1.data_ptr() == ptr


def test_mem_get_info() -> None:
    for device in range(torch.flagos.device_count()):
        free, total = torch.flagos.mem_get_info(device)
        assert 0 < free <= total
        assert total == torch.flagos.get_device_properties(device).total_memory
    assert torch.flagos.mem_get_info() == pytest.approx(torch.flagos.mem_get_info(0), rel=0.5)


@pytest.mark.parametrize("device", [0, 1])
def test_torch_accelerator_memory_agrees_with_torch_flagos(device: int) -> None:
    if device >= torch.flagos.device_count():
        pytest.skip("needs two flagos devices")
    keep = torch.empty(MB, dtype=torch.uint8, device=f"flagos:{device}")
    del keep
    keep = torch.empty(MB // 2, dtype=torch.uint8, device=f"flagos:{device}")
    assert torch.accelerator.memory_allocated(device) == torch.flagos.memory_allocated(device)
    assert torch.accelerator.max_memory_allocated(device) == torch.flagos.max_memory_allocated(
        device
    )
    assert torch.accelerator.memory_reserved(device) == torch.flagos.memory_reserved(device)
    assert torch.accelerator.max_memory_reserved(device) == torch.flagos.max_memory_reserved(device)
    generic = torch.accelerator.memory_stats(device)
    ours = torch.flagos.memory_stats(device)
    assert ours and {key: generic[key] for key in ours} == ours
    torch.accelerator.reset_peak_memory_stats(device)
    assert torch.flagos.max_memory_allocated(device) == torch.flagos.memory_allocated(device)
    del keep
    # A block with a segment of its own (the small blocks above may share one with tensors
    # other tests left alive), so emptying the cache gives it back whatever else is held.
    big = torch.empty(64 * MB, dtype=torch.uint8, device=f"flagos:{device}")
    del big
    before = torch.flagos.memory_reserved(device)
    torch.accelerator.empty_cache()
    assert torch.flagos.memory_reserved(device) < before


def test_torch_accelerator_reports_flagos() -> None:
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("flagos")
    assert torch.accelerator.device_count() == torch.flagos.device_count()


def test_invalid_device_index_rejected_by_memory_functions() -> None:
    bad = torch.flagos.device_count()
    for fn in (
        torch.flagos.memory_allocated,
        torch.flagos.memory_reserved,
        torch.flagos.max_memory_allocated,
        torch.flagos.max_memory_reserved,
        torch.flagos.memory_stats,
        torch.flagos.reset_peak_memory_stats,
        torch.flagos.mem_get_info,
    ):
        with pytest.raises((IndexError, RuntimeError), match=f"flagos:{bad}"):
            fn(bad)
    with pytest.raises(ValueError, match="flagos"):
        torch.flagos.memory_allocated("cpu")
    # A negative index is no alias of the current device (torch.cuda's allocator refuses it).
    for fn in (torch.flagos.memory_allocated, torch.flagos.memory_stats, torch.flagos.mem_get_info):
        with pytest.raises(RuntimeError, match="Invalid device argument -5"):
            fn(-5)
    with pytest.raises(TypeError, match="torch.flagos.Stream"):
        torch.flagos.caching_allocator_alloc(16, 0, 0)  # torch.cuda's raw-pointer int form


def test_storage_resize_is_accounted() -> None:
    t = torch.empty(0, dtype=torch.uint8, device="flagos")
    before = torch.flagos.memory_allocated()
    t.resize_(MB)
    assert torch.flagos.memory_allocated() - before >= MB
    t.fill_(1)
    t.resize_(2 * MB)
    assert torch.flagos.memory_allocated() - before >= 2 * MB
    assert int(t[:MB].sum()) == MB  # the old contents survived the move
    del t
    assert torch.flagos.memory_allocated() == before


@pytest.mark.parametrize(
    "big,small", [(80_000, 48_000), (3 * MB, 2 * MB), (1536 * 1024, 900 * 1024)]
)
def test_reused_larger_block_is_accounted_consistently(big: int, small: int) -> None:
    # A freed block may serve a smaller request; taking it and giving it back must leave the
    # statistics where they were (they once drifted below zero by the size difference).
    gc.collect()  # garbage of earlier tests must not be freed in the middle of this one
    torch.flagos.synchronize()
    before = torch.flagos.memory_stats()
    t = torch.empty(big, dtype=torch.uint8, device="flagos")
    ptr = t.data_ptr()
    # (on the cuda accelerator the pool is shared and may already hold a segment to serve it)
    device_allocs_with_big = torch.flagos.memory_stats()["num_device_alloc"]
    del t
    u = torch.empty(small, dtype=torch.uint8, device="flagos")
    during = torch.flagos.memory_stats()
    if u.data_ptr() == ptr:  # the cache reused the larger block: no new device allocation
        assert during["num_device_alloc"] == device_allocs_with_big
    assert during["allocated_bytes.all.current"] - before["allocated_bytes.all.current"] >= small
    assert during["requested_bytes.all.current"] - before["requested_bytes.all.current"] == small
    for kind in ("allocated_bytes", "active_bytes", "allocation"):
        pools = during[f"{kind}.small_pool.current"] + during[f"{kind}.large_pool.current"]
        assert pools == during[f"{kind}.all.current"], kind
    del u
    after = torch.flagos.memory_stats()
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.small_pool.current",
        "allocated_bytes.large_pool.current",
        "active_bytes.all.current",
        "requested_bytes.all.current",
        "allocation.all.current",
    ):
        assert after[key] == before[key], key


def test_statistics_return_to_baseline_after_mixed_workload() -> None:
    def workload() -> None:
        x = torch.randn(100, 100, device="flagos")
        for _ in range(10):
            z = torch.cat([x, x])
            float(z.sum())
            x.add_(1)
            m = x[x > 0]
            out = torch.empty(0, device="flagos")
            torch.mul(m, 2, out=out)
            v = x.t().contiguous() @ x
            assert v.shape == (100, 100) and out.shape == m.shape

    # A first run may leave lasting allocations of the native library (on the cuda
    # accelerator, cuBLAS keeps a 32 MiB workspace from the first matmul): take the baseline
    # after it, then check a second run leaves nothing behind.
    workload()
    _settle()
    before = torch.flagos.memory_stats()
    workload()
    _settle()
    after = torch.flagos.memory_stats()
    for key in (
        "allocated_bytes.all.current",
        "active_bytes.all.current",
        "allocation.all.current",
    ):
        assert after[key] == before[key], key
        assert after[key] >= 0, key
