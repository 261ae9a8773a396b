"""torch.flagos against torch.cuda, name by name (docs/reference/cuda-api-parity.md), and the
device queries and raw allocations that the table says flagos provides."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

import pytest
import torch

import torch_fl
from tests.conftest import REPO_ROOT

TABLE = REPO_ROOT / "docs" / "reference" / "cuda-api-parity.md"
ON_CPU = torch_fl._C._native_device_type() == "cpu"


def _rows() -> dict[str, str]:
    rows = {}
    for line in TABLE.read_text().splitlines():
        match = re.match(r"^\| `([A-Za-z_]\w*)` \| (.+) \|$", line)
        if match:
            rows[match.group(1)] = match.group(2)
    return rows


def test_every_torch_cuda_name_is_in_the_table() -> None:
    rows = _rows()
    undocumented = sorted(set(torch.cuda.__all__) - set(rows))
    assert not undocumented, f"add these torch.cuda names to {TABLE.name}: {undocumented}"


def test_the_table_says_what_torch_flagos_has() -> None:
    for name, note in _rows().items():
        provided = note == "provided"
        assert hasattr(torch.flagos, name) == provided, (name, note)
        if provided and not isinstance(getattr(torch.flagos, name), ModuleType):
            # exported, except the one name torch.flagos answers lazily (per device)
            assert name in torch.flagos.__all__ or name == "default_generators", name


def test_raw_allocations_are_counted_until_deleted() -> None:
    torch.flagos.synchronize()
    before = torch.flagos.memory_allocated()
    ptr = torch.flagos.caching_allocator_alloc(1 << 20)
    assert ptr != 0 and torch.flagos.memory_allocated() - before >= 1 << 20
    torch.flagos.caching_allocator_delete(ptr)
    assert torch.flagos.memory_allocated() == before
    with pytest.raises(ValueError, match="was not allocated by"):
        torch.flagos.caching_allocator_delete(ptr)
    with pytest.raises(ValueError, match="size must be >= 0"):
        torch.flagos.caching_allocator_alloc(-1)
    assert torch.flagos.caching_allocator_alloc(0) == 0


@pytest.mark.usefixtures("two_devices")
def test_raw_allocation_on_a_device_and_stream() -> None:
    before = torch.flagos.memory_allocated(1)
    side = torch.flagos.Stream(device="flagos:1")
    ptr = torch.flagos.caching_allocator_alloc(4096, device=1, stream=side)
    assert torch.flagos.memory_allocated(1) - before >= 4096
    assert torch.flagos.current_device() == 0
    torch.flagos.caching_allocator_delete(ptr)
    assert torch.flagos.memory_allocated(1) == before


@pytest.mark.skipif(not ON_CPU, reason="the cpu accelerator's answers")
def test_cpu_accelerator_device_queries_say_there_is_no_device() -> None:
    for query in ("utilization", "temperature", "power_draw", "clock_rate", "memory_usage"):
        with pytest.raises(RuntimeError, match=f"torch.flagos.{query}: the cpu accelerator"):
            getattr(torch.flagos, query)()
    with pytest.raises(RuntimeError, match="virtual devices over host memory"):
        torch.flagos.device_memory_used(0)
    assert torch.flagos.get_sync_debug_mode() == 0
    # Code written for CUDA may turn the check on: the mode is kept, and a host read (which
    # waits for no device here) passes under it.
    torch.flagos.set_sync_debug_mode("error")
    try:
        assert torch.ones(4, device="flagos").sum().item() == 4.0
    finally:
        torch.flagos.set_sync_debug_mode("default")
    assert torch.flagos.is_tf32_supported() is False
    assert torch.flagos.get_allocator_backend() == "native"


@pytest.mark.gpu
@pytest.mark.skipif(ON_CPU, reason="needs a device accelerator")
def test_device_queries_are_the_native_devices() -> None:
    assert torch.flagos.is_tf32_supported() == torch.cuda.is_tf32_supported()
    assert torch.flagos.get_allocator_backend() == torch.cuda.get_allocator_backend()
    if importlib.util.find_spec("pynvml") is not None:  # torch.cuda asks the driver through it
        assert torch.flagos.device_memory_used(0) > 0
        assert 0 <= torch.flagos.utilization(0) <= 100
        assert torch.flagos.temperature(0) > 0
        assert isinstance(torch.flagos.list_gpu_processes(0), str)
    x = torch.ones(4, device="flagos")
    torch.flagos.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError, match="called a synchronizing CUDA operation"):
            x.sum().item()  # a flagos wait is a CUDA synchronisation
    finally:
        torch.flagos.set_sync_debug_mode(0)
    assert torch.flagos.get_sync_debug_mode() == 0
