"""Profiler parity: a torch.profiler trace of a flagos workload shows the same native work as
the same workload on the native device (CUDA kernels with device time on the cuda
accelerator; the ATen CPU operators on the cpu accelerator)."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_fl

pytestmark = pytest.mark.main_ops
ACCELERATOR = torch_fl.build_config.ACCELERATOR


def _workload(device: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 128, generator=g).to(device)
    w = torch.randn(256, 128, generator=g).to(device)
    h = torch.nn.functional.relu(torch.nn.functional.linear(x, w))
    return torch.softmax(h, dim=-1).sum()


def _trace(device: str, activities: list[ProfilerActivity]) -> profile:
    _workload(device)  # warm up: lazy initialisation stays out of the trace
    with profile(activities=activities) as prof:
        result = _workload(device)
        result.item()
    return prof


def _kernels(prof: profile) -> dict[str, float]:
    """Device-side events (kernels), by name, with their total device time."""
    times: dict[str, float] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CPU and not event.name.startswith(
            ("Memcpy", "Memset")
        ):
            times[event.name] = times.get(event.name, 0.0) + event.device_time_total
    return times


def _describe(prof: profile) -> list[tuple[str, str, float]]:
    return sorted({(e.name, str(e.device_type), e.device_time_total) for e in prof.events()})


@pytest.mark.skipif(ACCELERATOR != "cpu", reason="cpu accelerator trace")
def test_cpu_trace_has_the_native_operators() -> None:
    native = {e.name for e in _trace("cpu", [ProfilerActivity.CPU]).events()}
    flagos = {e.name for e in _trace("flagos", [ProfilerActivity.CPU]).events()}
    for op in ("aten::linear", "aten::relu", "aten::softmax", "aten::sum"):
        assert op in native and op in flagos, op
    # The kernels of the operators really run under the flagos ones (linear decomposes to
    # addmm or to matmul/mm depending on the backend).
    assert "aten::_softmax" in flagos
    assert {"aten::addmm", "aten::mm"} & flagos


@pytest.mark.gpu
@pytest.mark.skipif(
    ACCELERATOR not in ("cuda", "dcu"), reason="needs a GPU (the cuda or dcu accelerator)"
)
def test_cuda_trace_has_the_same_kernels_with_device_time() -> None:
    acts = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    native_prof = _trace("cuda", acts)
    native = _kernels(native_prof)
    flagos = _kernels(_trace("flagos", acts))
    assert native, f"the cuda trace recorded no kernels: {_describe(native_prof)}"
    assert set(native) == set(flagos), (sorted(native), sorted(flagos))
    assert any("at::native::" in name for name in flagos), sorted(flagos)
    assert all(t > 0 for t in flagos.values()), flagos


def test_legacy_profiler_times_flagos_operators() -> None:
    # torch.autograd.profiler.profile(use_device="flagos") times device work through the
    # PrivateUse1 profiler stubs (csrc/runtime/profiler_stubs.cpp); without them every operator
    # warned "PrivateUse1 used in profiler but not enabled" and totals were garbage.
    import warnings

    x = torch.randn(64, 64, device="flagos")
    (x @ x).relu()  # warm up
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autograd.profiler.profile(use_device="flagos") as prof:
            (x @ x).relu().sum().item()
    assert not [w for w in caught if "PrivateUse1" in str(w.message)], caught
    averages = {event.key: event for event in prof.key_averages()}
    mm = averages["aten::mm"]
    assert 0 < mm.cpu_time_total < 10e6  # microseconds
    assert 0 <= mm.device_time_total < 10e6
    assert all(0 <= event.cpu_time_total < 10e6 for event in averages.values())


def test_profile_memory_counts_flagos_memory_as_device_memory() -> None:
    # profile_memory=True: flagos allocations are device memory events, as CUDA's are (the cpu
    # accelerator's pool reports them; on the cuda accelerator torch's CUDA pool does).
    activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    x = torch.ones(1000, device="flagos")
    with profile(activities=activities, profile_memory=True) as prof:
        made = torch.empty(1000, 1000, device="flagos")
        doubled = x * 2
        del made
    averages = {event.key: event for event in prof.key_averages()}
    assert averages["aten::empty"].device_memory_usage >= 4_000_000
    assert averages["aten::mul"].device_memory_usage >= doubled.nbytes
    freed = [e for e in prof.events() if e.name == "[memory]" and e.device_memory_usage < 0]
    assert any(e.device_memory_usage <= -4_000_000 for e in freed)


def test_a_live_flagos_result_is_not_also_counted_as_cpu_memory() -> None:
    # On the cpu accelerator a kernel's result is host memory the CPU allocator made and
    # reported; adopted as flagos memory, it must not stay counted as CPU memory too while the
    # flagos tensor lives (on cuda such results show no CPU memory at all).
    activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    x = torch.randn(256, 256, device="flagos")
    with profile(activities=activities, profile_memory=True) as prof:
        kept = [x @ x, x + 1]
        dropped = x * 3
        del dropped
    averages = prof.key_averages()
    assert sum(e.self_device_memory_usage for e in averages) >= sum(t.nbytes for t in kept)
    assert sum(e.self_cpu_memory_usage for e in averages) == 0
    with profile(activities=activities, profile_memory=True):
        del kept  # freed while recording: balanced, no stray CPU free events
    assert torch.ones(2, device="flagos").sum().item() == 2.0
