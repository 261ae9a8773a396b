"""torch_fl.routing at run time: overrides, stats, strict mode, the host-copy cpu_fallback,
profiler events, and concurrent dispatch through different routes."""

from __future__ import annotations

import contextlib
import threading

import pytest
import torch

import torch_fl
from torch_fl import routing


def test_set_route_get_route_and_context_manager():
    default = routing.default_route()
    assert routing.get_route("aten::add.Tensor") == default
    with routing.route("add.Tensor", "flagos_python"):
        assert routing.get_route("add.Tensor") == "flagos_python"
        assert routing.overrides()["aten::add.Tensor"] == "flagos_python (api)"
        with routing.route("aten::add.Tensor", "cpu_fallback"):
            assert routing.get_route("add.Tensor") == "cpu_fallback"
        assert routing.get_route("add.Tensor") == "flagos_python"
    assert routing.get_route("add.Tensor") == default
    assert "aten::add.Tensor" not in routing.overrides()
    routing.set_route("relu.default", "flagos_python")
    try:
        assert routing.get_route("aten::relu") == "flagos_python"
    finally:
        routing.set_route("relu", None)
    assert routing.route_origin("relu") in ("default", "table") or routing.route_origin(
        "relu"
    ).startswith("table ")


def _open_block(op: str, route: str, entered: threading.Event, leave: threading.Event):
    def body() -> None:
        with routing.route(op, route):
            entered.set()
            assert leave.wait(30)

    thread = threading.Thread(target=body)
    thread.start()
    assert entered.wait(30)
    return thread


@pytest.mark.parametrize("first_to_close", ["older", "newer"])
def test_route_blocks_on_threads_may_close_in_any_order(first_to_close):
    """Two threads' blocks overlap; whichever closes first, the newest open block's route is
    in force, and the override found before them is back once both have closed."""
    routing.set_route("relu", "flagos_python")  # the override the blocks find
    try:
        leave = {name: threading.Event() for name in ("older", "newer")}
        older = _open_block("relu", "cpu_fallback", threading.Event(), leave["older"])
        assert routing.get_route("relu") == "cpu_fallback"
        newer = _open_block("relu", "flagos_python", threading.Event(), leave["newer"])
        threads = {"older": older, "newer": newer}
        leave[first_to_close].set()
        threads[first_to_close].join()
        still_open = "newer" if first_to_close == "older" else "older"
        assert routing.get_route("relu") == (
            "cpu_fallback" if still_open == "older" else "flagos_python"
        )
        leave[still_open].set()
        threads[still_open].join()
        assert routing.overrides()["aten::relu"] == "flagos_python (api)"
    finally:
        routing.set_route("relu", None)
    assert "aten::relu" not in routing.overrides()


def test_a_route_block_with_a_bad_route_changes_nothing():
    with pytest.raises(RuntimeError, match="unknown route 'gpu'"):
        with routing.route("relu", "gpu"):
            pass
    assert "aten::relu" not in routing.overrides()
    with routing.route("relu", "cpu_fallback"):
        assert routing.get_route("relu") == "cpu_fallback"
    assert "aten::relu" not in routing.overrides()


@pytest.mark.parametrize(
    ("op", "route", "error", "match"),
    [
        ("add.Tensor", "gpu", RuntimeError, "unknown route 'gpu'; valid routes: cpu_fallback"),
        ("add.Tensor", "flaggems_cpp", RuntimeError, "FLAGOS_BUILD_FLAGGEMS_CPP=1"),
        ("no_such_op", "cpu_fallback", RuntimeError, "unknown operator 'aten::no_such_op'"),
        ("add.Bogus", "cpu_fallback", RuntimeError, "overloads of aten::add"),
        ("add..Tensor", "cpu_fallback", RuntimeError, "is not an operator name"),
    ],
)
def test_set_route_errors(op, route, error, match):
    with pytest.raises(error, match=match):
        routing.set_route(op, route)


@pytest.mark.skipif(torch_fl.build_config.ACCELERATOR != "cpu", reason="cpu accelerator build")
def test_available_routes_on_cpu_accelerator():
    available = routing.available_routes()
    assert available["cpu_fallback"] == "" and available["flagos_python"] == ""
    assert "FLAGOS_ACCELERATOR=cpu" in available["cuda"]
    assert "FLAGOS_BUILD_FLAGGEMS_CPP" in available["flaggems_cpp"]
    with pytest.raises(RuntimeError, match="needs the cuda or dcu accelerator"):
        routing.set_route("mm", "cuda")


def test_operators_reach_the_router_under_their_own_name():
    a = torch.ones(4, 4, device="flagos")
    routing.reset_stats()
    a + a
    a.add_(a)
    a * 2
    torch.mm(a, a)
    stats = routing.stats()
    for op in ("aten::add.Tensor", "aten::add_.Tensor", "aten::mul.Tensor", "aten::mm"):
        assert stats[op] == {routing.default_route(): 1}
    assert "aten::add.out" not in stats
    assert routing.reaches_router("add.Tensor")
    assert not routing.reaches_router("view")  # flagos' own kernel
    assert not routing.reaches_router("linear")  # composite
    routing.reset_stats()
    assert routing.stats() == {}


@contextlib.contextmanager
def _copy_fallback(*ops: str):
    """The host-copy cpu_fallback (what device accelerators run), forced on for a block; `ops`
    are routed to it for the block (on a device accelerator their default route is another)."""
    with contextlib.ExitStack() as stack:
        for op in ops:
            stack.enter_context(routing.route(op, "cpu_fallback"))
        torch_fl._C._routing_set_force_copy_fallback(True)
        try:
            yield
        finally:
            torch_fl._C._routing_set_force_copy_fallback(False)


def test_copy_fallback_semantics():
    g = torch.Generator().manual_seed(0)
    a_cpu, b_cpu = torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)
    a, b = a_cpu.to("flagos"), b_cpu.to("flagos")
    ops = ("aten::add.Tensor", "aten::mul_.Tensor", "aten::add.out", "aten::index.Tensor")
    with _copy_fallback(*ops, "aten::cat"):
        routing.reset_stats()
        c = a + b
        torch.testing.assert_close(c.cpu(), a_cpu + b_cpu)
        assert c.device.type == "flagos"
        r = a.mul_(b)
        assert r is a
        torch.testing.assert_close(a.cpu(), a_cpu * b_cpu)
        out = torch.empty(0, device="flagos")
        assert torch.add(a, b, out=out) is out
        torch.testing.assert_close(out.cpu(), a_cpu * b_cpu + b_cpu)
        idx = torch.tensor([4, 0], device="flagos")
        torch.testing.assert_close(b[idx].cpu(), b_cpu[idx.cpu()])
        torch.testing.assert_close(torch.cat([a, b]).cpu(), torch.cat([a_cpu * b_cpu, b_cpu]))
        stats = routing.stats()
        for op in ops:
            assert stats[op] == {"cpu_fallback": 1}, op


def test_strict_mode_turns_host_copies_into_errors():
    a = torch.ones(3, device="flagos")
    assert not routing.strict(None)
    with routing.strict():
        assert routing.strict(None)
        a + a  # the default route (on the cpu accelerator the zero-copy cpu_fallback): allowed
        with _copy_fallback("aten::add.Tensor"):
            with pytest.raises(
                RuntimeError,
                match=r"strict mode: aten::add\.Tensor would run on "
                r"cpu_fallback .*FLAGOS_OP_add__Tensor=<route>",
            ):
                a + a
    assert not routing.strict(None)
    routing.strict(True)
    try:
        assert routing.strict(None)
    finally:
        routing.strict(False)


def test_fallback_warning_once_per_operator(capfd):
    a = torch.ones(3, device="flagos")
    flags = torch_fl._C._routing_log_flags()
    torch_fl._C._routing_set_log_flags(4)  # FLAGOS_LOG=fallback
    try:
        with _copy_fallback("aten::sigmoid"):
            for _ in range(3):
                torch.sigmoid(a)
    finally:
        torch_fl._C._routing_set_log_flags(flags)
    err = capfd.readouterr().err
    assert err.count("[flagos fallback] warning: aten::sigmoid runs on cpu_fallback") == 1


def test_profiler_shows_the_route():
    a = torch.ones(8, 8, device="flagos")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.mm(a, a)
    names = [e.name for e in prof.events()]
    assert f"flagos::{routing.default_route()}" in names
    assert "aten::mm" in names


def test_eight_threads_through_different_routes():
    def py_mul(self, other):
        return torch.mul(self, other)

    def py_sub(self, other, *, alpha=1):
        return torch.sub(self, other, alpha=alpha)

    routing.register_python_kernel("mul.Tensor", py_mul)
    routing.register_python_kernel("sub.Tensor", py_sub)
    routing.set_route("mul.Tensor", "flagos_python")
    routing.set_route("sub.Tensor", "flagos_python")
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(i: int) -> None:
        try:
            g = torch.Generator().manual_seed(i)
            x_cpu = torch.randn(16, 16, generator=g)
            y_cpu = torch.randn(16, 16, generator=g)
            x, y = x_cpu.to("flagos"), y_cpu.to("flagos")
            start.wait()
            for _ in range(200):
                if i % 2 == 0:  # cpu_fallback and flagos_python interleaved in each thread
                    got = ((x + y) * y - x).cpu()
                    want = (x_cpu + y_cpu) * y_cpu - x_cpu
                else:
                    got = (torch.mm(x, y) - torch.relu(x) * 2).cpu()
                    want = torch.mm(x_cpu, y_cpu) - torch.relu(x_cpu) * 2
                torch.testing.assert_close(got, want)
        except BaseException as exc:  # noqa: BLE001  (reported by the main thread)
            errors.append(exc)

    routing.reset_stats()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for op in ("mul.Tensor", "sub.Tensor"):
            routing.set_route(op, None)
            routing.register_python_kernel(op, None)
    assert not errors, errors[0]
    stats = routing.stats()
    assert stats["aten::mul.Tensor"] == {"flagos_python": 1600}
    assert stats["aten::sub.Tensor"] == {"flagos_python": 1600}
    assert stats["aten::add.Tensor"] == {routing.default_route(): 800}
    assert stats["aten::mm"] == {routing.default_route(): 800}


def test_route_changes_while_threads_dispatch():
    """Routes flip between cpu_fallback and flagos_python while seven threads add: every
    result is right and every call is counted on one of the two routes."""

    def py_add(self, other, *, alpha=1):
        return torch.add(self, other, alpha=alpha)

    routing.register_python_kernel("add.Tensor", py_add)
    stop = threading.Event()
    errors: list[BaseException] = []

    def flipper() -> None:
        routes = ("flagos_python", "cpu_fallback")
        i = 0
        while not stop.is_set():
            routing.set_route("add.Tensor", routes[i % 2])
            i += 1
            stop.wait(0.0002)

    def adder(seed: int) -> None:
        try:
            g = torch.Generator().manual_seed(seed)
            x_cpu = torch.randn(8, 8, generator=g)
            x = x_cpu.to("flagos")
            for _ in range(300):
                torch.testing.assert_close((x + x).cpu(), x_cpu + x_cpu)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    routing.reset_stats()
    flip = threading.Thread(target=flipper)
    adders = [threading.Thread(target=adder, args=(i,)) for i in range(7)]
    flip.start()
    try:
        for t in adders:
            t.start()
        for t in adders:
            t.join()
    finally:
        stop.set()
        flip.join()
        routing.set_route("add.Tensor", None)
        routing.register_python_kernel("add.Tensor", None)
    assert not errors, errors[0]
    counts = routing.stats()["aten::add.Tensor"]
    assert sum(counts.values()) == 7 * 300
    assert set(counts) <= {"flagos_python", "cpu_fallback"}


def test_strict_reads_without_changing_and_takes_only_booleans():
    assert not routing.strict(None)
    assert not routing.strict(None)  # reading twice leaves it off
    for value in ("false", "off", 1, 0.0):
        with pytest.raises(TypeError, match=r"expected True, False or None"):
            routing.strict(value)
    assert not routing.strict(None)


def test_a_provider_with_a_bad_kernel_registers_nothing():
    before = routing.python_kernels()
    with pytest.raises(TypeError, match=r"'aten::neg'|'neg'.*must be callable.*nothing"):
        routing.register_provider({"abs": lambda x: x.abs(), "neg": 3})
    assert routing.python_kernels() == before
