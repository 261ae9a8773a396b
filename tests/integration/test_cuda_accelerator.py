"""The cuda accelerator on a real GPU: flagos:N is cuda:N, one memory pool, CUDA streams,
events and RNG, zero-copy views both ways. Runs on the H200 (marker `gpu`)."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_fl
from tests.conftest import report_from_forked_child

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        torch_fl.build_config.ACCELERATOR != "cuda", reason="needs the cuda accelerator build"
    ),
]


def test_basic_device_check_matches_cuda() -> None:
    x = torch.randn(512, 512, device="flagos")
    result = torch.mm(x, x)
    reference = torch.mm(x.cpu().cuda(), x.cpu().cuda())
    assert result.device == torch.device("flagos", 0)
    torch.testing.assert_close(result.cpu(), reference.cpu())


def test_flagos_memory_is_cuda_pool_memory() -> None:
    torch.flagos.synchronize()
    before_flagos = torch.flagos.memory_allocated()
    before_cuda = torch.cuda.memory_allocated()
    x = torch.empty(1 << 20, dtype=torch.uint8, device="flagos")
    assert torch.flagos.memory_allocated() - before_flagos >= 1 << 20
    assert torch.cuda.memory_allocated() - before_cuda >= 1 << 20
    view = torch_fl._C._flagos_to_cuda_view(x)
    assert view.device == torch.device("cuda", 0)
    assert view.data_ptr() == x.data_ptr()
    back = torch_fl._C._cuda_to_flagos_view(view)
    assert back.device == torch.device("flagos", 0) and back.data_ptr() == x.data_ptr()
    del x, view, back
    assert torch.flagos.memory_allocated() == before_flagos
    torch.flagos.empty_cache()
    assert torch.flagos.memory_reserved() == torch.cuda.memory_reserved()


def test_streams_are_cuda_streams() -> None:
    s = torch.flagos.Stream()
    with torch.flagos.stream(s):
        assert torch.cuda.current_stream().stream_id == s.stream_id
        assert torch.flagos.current_stream().stream_id == s.stream_id
        a = torch.randn(1024, 1024, device="flagos")
        b = a @ a
    torch.flagos.synchronize()
    assert torch.cuda.current_stream().stream_id == torch.flagos.current_stream().stream_id
    torch.testing.assert_close(b.cpu(), (a.cpu().cuda() @ a.cpu().cuda()).cpu())


def test_events_time_gpu_work() -> None:
    start = torch.flagos.Event(enable_timing=True)
    end = torch.flagos.Event(enable_timing=True)
    a = torch.randn(2048, 2048, device="flagos")
    start.record()
    for _ in range(5):
        a = a @ a / 2048
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) > 0


def test_rng_reproducible_and_generator() -> None:
    torch.flagos.manual_seed(7)
    a = torch.randn(1000, device="flagos")
    state = torch.flagos.get_rng_state()
    b = torch.randn(1000, device="flagos")
    torch.flagos.set_rng_state(state)
    c = torch.randn(1000, device="flagos")
    torch.testing.assert_close(b.cpu(), c.cpu())
    torch.flagos.manual_seed(7)
    torch.testing.assert_close(torch.randn(1000, device="flagos").cpu(), a.cpu())
    g = torch.Generator("flagos").manual_seed(3)
    d = torch.rand(100, device="flagos", generator=g)
    g.manual_seed(3)
    torch.testing.assert_close(torch.rand(100, device="flagos", generator=g).cpu(), d.cpu())
    assert 0.0 <= d.min().item() and d.max().item() < 1.0


def test_pinned_non_blocking_copy_round_trip() -> None:
    host = torch.randn(1 << 16).pin_memory()
    assert host.is_pinned()
    dev = host.to("flagos", non_blocking=True)
    back = torch.empty_like(host).pin_memory()
    back.copy_(dev, non_blocking=True)
    torch.flagos.synchronize()
    torch.testing.assert_close(back, host)


def test_device_properties_report_the_gpu() -> None:
    props = torch.flagos.get_device_properties(0)
    ref = torch.cuda.get_device_properties(0)
    assert props.name == ref.name
    assert props.total_memory == ref.total_memory
    assert torch.flagos.get_device_capability(0) == torch.cuda.get_device_capability(0)


def test_training_step_matches_cpu() -> None:
    # The reference trains on the CPU: a CUDA backward cannot run in a process where a
    # PrivateUse1 backend is registered (upstream pytorch/pytorch#161129, see docs).
    torch.manual_seed(0)
    layers = (torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128))
    model = torch.nn.Sequential(*layers, torch.nn.Linear(128, 10))
    ref = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128), torch.nn.Linear(128, 10)
    )
    ref.load_state_dict(model.state_dict())
    model.to("flagos")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3)
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    for _ in range(3):
        for m, o, dev in ((model, opt, "flagos"), (ref, ref_opt, "cpu")):
            o.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(x.to(dev)), y.to(dev))
            loss.backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        assert p.device.type == "flagos"
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)


def test_non_blocking_copy_does_not_wait_for_the_stream() -> None:
    src = torch.randn(1 << 20, device="flagos")
    dst = torch.empty(1 << 20).pin_memory()
    torch.cuda._sleep(int(2e8))  # keep the current (flagos == cuda) stream busy
    dst.copy_(src, non_blocking=True)
    assert not torch.flagos.current_stream().query(), "the copy waited for the stream"
    torch.flagos.synchronize()
    torch.testing.assert_close(dst, src.cpu())


def _load_kernels(x: torch.Tensor) -> None:
    # CUDA loads a kernel's module at its first launch (lazy loading), and loading can wait
    # for the whole device; launch the kernels once before timing-sensitive checks.
    (x * 2).relu().sum()
    torch.flagos.synchronize()


def test_record_stream_keeps_memory_for_the_side_stream() -> None:
    side = torch.flagos.Stream()
    x = torch.ones(1 << 20, device="flagos")
    _load_kernels(x)
    ptr = x.data_ptr()
    with torch.flagos.stream(side):
        torch.cuda._sleep(int(2e8))
        y = x * 2
    x.record_stream(side)
    del x
    z = torch.empty(1 << 20, device="flagos")  # must not reuse x's block while side runs
    assert z.data_ptr() != ptr
    side.synchronize()
    assert torch.equal(y.cpu(), torch.full((1 << 20,), 2.0))


def test_invalid_device_index_is_rejected() -> None:
    count = torch.flagos.device_count()
    with pytest.raises((IndexError, RuntimeError), match="flagos"):
        torch.empty(1, device=f"flagos:{count}")


def test_side_stream_work_leaves_the_default_stream_free() -> None:
    side = torch.flagos.Stream()
    x = torch.randn(1 << 20, device="flagos")
    _load_kernels(x)
    with torch.flagos.stream(side):
        torch.cuda._sleep(int(2e8))
        y = (x * 2).relu().sum()  # routed operators must queue on `side`, behind the sleep
    assert not side.query()
    assert torch.flagos.default_stream().query(), "work ran on the default stream"
    side.synchronize()
    torch.testing.assert_close(y.cpu(), (x.cpu() * 2).relu().sum())


def test_cpu_fallback_copies_through_the_host_and_is_counted() -> None:
    a = torch.randn(64, 32, device="flagos")
    b = torch.randn(32, device="flagos")
    ref_a, ref_b = a.cpu(), b.cpu()
    torch_fl.routing.reset_stats()
    with (
        torch_fl.routing.route("add.Tensor", "cpu_fallback"),
        torch_fl.routing.route("add_.Tensor", "cpu_fallback"),
        torch_fl.routing.route("add.out", "cpu_fallback"),
    ):
        fresh = a + b
        inplace = a.clone()
        returned = inplace.add_(b)
        out = torch.empty(0, device="flagos")
        torch.add(a, b, out=out)
    stats = torch_fl.routing.stats()
    for op in ("aten::add.Tensor", "aten::add_.Tensor", "aten::add.out"):
        assert stats[op].get("cpu_fallback", 0) >= 1, stats.get(op)
    assert returned is inplace
    for t in (fresh, inplace, out):
        assert t.device == torch.device("flagos", 0)
        torch.testing.assert_close(t.cpu(), ref_a + ref_b)
    assert out.shape == (64, 32)


def _memcpy_events(fn) -> list[str]:
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if "memcpy" in e.name.lower()]


def test_growing_an_empty_out_tensor_copies_nothing() -> None:
    # An empty out= tensor is grown by the kernel; there is nothing to carry over, so no device
    # copy may be issued (cuda issues none either).
    for device in ("cuda", "flagos"):
        out = torch.empty(0, device=device)
        torch.arange(1000, out=out)  # warm up
        out = torch.empty(0, device=device)
        events = _memcpy_events(lambda out=out: torch.arange(1000, out=out))
        assert events == [], (device, events)
        torch.testing.assert_close(out.cpu(), torch.arange(1000, dtype=torch.float32))


def _forked_child_report(queue) -> None:  # runs in a forked child
    report = {"bad_fork": torch.flagos._is_in_bad_fork()}
    report["initialized"] = torch.flagos.is_initialized()
    torch.manual_seed(7)  # what every DataLoader worker does: must not touch the device
    report["seeded"] = True
    try:
        torch.empty(4, device="flagos")
    except RuntimeError as exc:
        report["error"] = str(exc)
    queue.put(report)


def test_a_child_forked_after_the_device_started_reports_a_bad_fork() -> None:
    torch.ones(2, device="flagos").sum().item()  # the CUDA runtime is started
    report = report_from_forked_child(_forked_child_report)
    assert report["bad_fork"] and not report["initialized"] and report["seeded"]
    assert "forked" in report["error"] and "spawn" in report["error"], report["error"]
    assert not torch.flagos._is_in_bad_fork()  # the parent is unaffected


def test_a_cuda_graph_captures_and_replays_flagos_work() -> None:
    # flagos streams are CUDA streams and flagos memory comes from CUDA's caching allocator, so
    # torch.cuda.graph captures flagos operators (allocations go to the graph's private pool).
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8))
    reference = copy.deepcopy(model)  # stays on the CPU
    model.to("flagos")
    static_in = torch.randn(16, 64, device="flagos")
    side = torch.flagos.Stream()
    side.wait_stream(torch.flagos.current_stream())
    with torch.flagos.stream(side), torch.no_grad():
        for _ in range(3):  # warm up outside the capture, as CUDA graphs require
            model(static_in)
    torch.flagos.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph):
        static_out = model(static_in)
    assert static_out.device.type == "flagos"
    for seed in (1, 2):
        fresh = torch.randn(16, 64, generator=torch.Generator().manual_seed(seed))
        static_in.copy_(fresh.to("flagos"))
        graph.replay()
        torch.flagos.synchronize()
        with torch.no_grad():
            expected = reference(fresh)
        torch.testing.assert_close(static_out.cpu(), expected, rtol=1e-4, atol=1e-4)
