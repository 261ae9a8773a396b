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


def test_torch_cuda_counts_flagos_memory_from_the_first_tensor(python_subprocess) -> None:
    # torch.cuda's statistics read 0 until torch.cuda's Python module is initialized; flagos's
    # initialization does that, so a process that only ever used flagos sees its memory there.
    done = python_subprocess(
        "import torch, torch_fl\n"
        "x = torch.empty(1 << 20, dtype=torch.uint8, device='flagos')\n"
        "print('CUDA', torch.cuda.is_initialized(), torch.cuda.memory_allocated() >= 1 << 20,"
        " torch.cuda.memory_stats().get('allocation.all.current', 0) >= 1)\n"
    )
    assert done.returncode == 0, done.stderr
    assert "CUDA True True True" in done.stdout


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
    assert not torch.flagos.is_current_stream_capturing()
    with torch.no_grad(), torch.cuda.graph(graph):
        assert torch.flagos.is_current_stream_capturing()  # the capturing CUDA stream is ours
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


def _lists(device: str, seed: int = 0, count: int = 3) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(5, 7), (33,), (2, 3, 4)][:count]
    return [torch.randn(*s, generator=g).abs().add(0.5).to(device) for s in shapes]


# The _foreach_ fast kernels (all direct, FLAGOS_FAST_DIRECT, but norm, which is aliased), each
# called as optimizers call them; `ls(seed)` makes a fresh list on the device under test.
FOREACH_CASES = {
    "add_scalar": lambda ls, d: torch._foreach_add(ls(0), 1.5),
    "add__scalar": lambda ls, d: torch._foreach_add_(ls(0), 1.5),
    "add_list": lambda ls, d: torch._foreach_add(ls(0), ls(1), alpha=0.3),
    "add__list": lambda ls, d: torch._foreach_add_(ls(0), ls(1), alpha=0.3),
    "add__scalarlist": lambda ls, d: torch._foreach_add_(ls(0), [0.1, 0.2, 0.3]),
    "add__tensor": lambda ls, d: torch._foreach_add_(ls(0), torch.tensor(0.7, device=d)),
    "sub__scalar": lambda ls, d: torch._foreach_sub_(ls(0), 0.25),
    "sub__list": lambda ls, d: torch._foreach_sub_(ls(0), ls(1), alpha=2.0),
    "mul_scalar": lambda ls, d: torch._foreach_mul(ls(0), 0.5),
    "mul__scalar": lambda ls, d: torch._foreach_mul_(ls(0), 0.5),
    "mul__list": lambda ls, d: torch._foreach_mul_(ls(0), ls(1)),
    "mul__scalarlist": lambda ls, d: torch._foreach_mul_(ls(0), [2.0, 3.0, 4.0]),
    "mul__tensor": lambda ls, d: torch._foreach_mul_(ls(0), torch.tensor(1.25, device=d)),
    "div_scalar": lambda ls, d: torch._foreach_div(ls(0), 3.0),
    "div_scalarlist": lambda ls, d: torch._foreach_div(ls(0), [2.0, 3.0, 4.0]),
    "div__scalar": lambda ls, d: torch._foreach_div_(ls(0), 3.0),
    "div__list": lambda ls, d: torch._foreach_div_(ls(0), ls(1)),
    "div__scalarlist": lambda ls, d: torch._foreach_div_(ls(0), [2.0, 3.0, 4.0]),
    "div__tensor": lambda ls, d: torch._foreach_div_(ls(0), torch.tensor(1.5, device=d)),
    "addcmul__scalar": lambda ls, d: torch._foreach_addcmul_(ls(0), ls(1), ls(2), value=0.1),
    "addcmul__scalarlist": lambda ls, d: torch._foreach_addcmul_(
        ls(0), ls(1), ls(2), [0.1, 0.2, 0.3]
    ),
    "addcmul__tensor": lambda ls, d: torch._foreach_addcmul_(
        ls(0), ls(1), ls(2), torch.tensor([0.1, 0.2, 0.3])
    ),
    "addcdiv__scalar": lambda ls, d: torch._foreach_addcdiv_(ls(0), ls(1), ls(2), value=-0.1),
    "addcdiv__scalarlist": lambda ls, d: torch._foreach_addcdiv_(
        ls(0), ls(1), ls(2), [0.1, 0.2, 0.3]
    ),
    "addcdiv__tensor": lambda ls, d: torch._foreach_addcdiv_(
        ls(0), ls(1), ls(2), torch.tensor([0.1, 0.2, 0.3])
    ),
    "lerp__scalar": lambda ls, d: torch._foreach_lerp_(ls(0), ls(1), 0.1),
    "lerp__list": lambda ls, d: torch._foreach_lerp_(ls(0), ls(1), ls(2)),
    "sqrt": lambda ls, d: torch._foreach_sqrt(ls(0)),
    "sqrt_": lambda ls, d: torch._foreach_sqrt_(ls(0)),
    "neg": lambda ls, d: torch._foreach_neg(ls(0)),
    "neg_": lambda ls, d: torch._foreach_neg_(ls(0)),
    "zero_": lambda ls, d: torch._foreach_zero_(ls(0)),
    "norm": lambda ls, d: torch._foreach_norm(ls(0), 2),
}


def _run_foreach(case, device: str, make) -> list[torch.Tensor]:
    lists: list[list[torch.Tensor]] = []

    def ls(seed: int) -> list[torch.Tensor]:
        lists.append(make(device, seed))
        return lists[-1]

    out = case(ls, device)
    # In-place variants return None: their result is the first list, written in place.
    results = list(out) if out is not None else lists[0]
    torch.cuda.synchronize()
    return results


@pytest.mark.parametrize("name", sorted(FOREACH_CASES))
@pytest.mark.parametrize("layout", ["contiguous", "strided", "mixed_dtypes"])
def test_foreach_kernels_on_flagos_lists_match_cuda(name: str, layout: str) -> None:
    # Direct kernels hand the flagos lists to CUDA's _foreach_ kernels; strided or mixed-dtype
    # lists take the kernels' per-tensor fallback, which dispatches back to flagos operators.
    def make(device: str, seed: int) -> list[torch.Tensor]:
        tensors = _lists(device, seed)
        if layout == "strided":
            tensors[0] = tensors[0].t()
        elif layout == "mixed_dtypes" and not name.startswith(("lerp", "norm")):
            tensors[1] = tensors[1].double()
        return tensors

    case = FOREACH_CASES[name]
    got = _run_foreach(case, "flagos", make)
    want = _run_foreach(case, "cuda", make)
    for g, w in zip(got, want, strict=True):
        assert g.device == torch.device("flagos", 0) and g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w.cpu(), rtol=0, atol=0)


def test_foreach_kernels_run_on_the_current_flagos_stream() -> None:
    tensors = _lists("flagos", 0)
    expected = [t.cpu() * 3 for t in tensors]
    side = torch.flagos.Stream()
    side.wait_stream(torch.flagos.current_stream())
    with torch.flagos.stream(side):
        torch.cuda._sleep(int(5e7))  # the multiplication must wait for this on the side stream
        torch._foreach_mul_(tensors, 3.0)
    side.synchronize()
    for t, e in zip(tensors, expected, strict=True):
        torch.testing.assert_close(t.cpu(), e, rtol=0, atol=0)


def test_foreach_rejects_a_list_that_mixes_flagos_and_cuda() -> None:
    mixed = [torch.ones(3, device="flagos"), torch.ones(3, device="cuda")]
    with pytest.raises(RuntimeError, match="same device|flagos"):
        torch._foreach_mul_(mixed, 2.0)


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=True),
        lambda p: torch.optim.Adam(p, lr=0.01, weight_decay=0.01, foreach=True),
        lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True, foreach=True),
    ],
    ids=["sgd_nesterov", "adam", "adamw_amsgrad"],
)
def test_foreach_optimizer_steps_match_cuda(make_opt) -> None:
    # Gradients are set, not computed: a CUDA backward cannot run beside a PrivateUse1
    # backend (pytorch/pytorch#161129). The kernels are CUDA's on both sides: equal bits.
    params = {d: [torch.nn.Parameter(t) for t in _lists(d, 0)] for d in ("flagos", "cuda")}
    opts = {d: make_opt(p) for d, p in params.items()}
    for step in range(3):
        for d, ps in params.items():
            for p, g in zip(ps, _lists(d, 10 + step), strict=True):
                p.grad = g
            opts[d].step()
    for f, c in zip(params["flagos"], params["cuda"], strict=True):
        assert f.device.type == "flagos"
        torch.testing.assert_close(f.detach().cpu(), c.detach().cpu(), rtol=0, atol=0)
