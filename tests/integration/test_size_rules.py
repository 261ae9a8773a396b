"""Size rules in routing tables: `<op> [numel ..., dtype = ...] = <route>` lines route each
call by the element count of its largest tensor argument and its first floating-point
tensor's dtype."""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

import torch_fl
from tests.conftest import run_python
from torch_fl import flaggems, routing

# The zero-copy route of this build: what calls take when no rule sends them elsewhere.
NATIVE = "cpu_fallback" if torch_fl.build_config.ACCELERATOR == "cpu" else "cuda"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).replace("NATIVE", NATIVE))
    return path


@pytest.fixture
def table(tmp_path: Path) -> Iterator[Callable]:
    """load(text) makes `text` the table in force; the test's end restores the import-time one."""

    def load(text: str, name: str = "rules.conf") -> Path:
        path = write(tmp_path, name, text)
        routing.load_table(path)
        return path

    yield load
    routing.load_table()


def tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for item in value for t in tensors(item)]
    return []


def moved(value, device: torch.device | str):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(moved(item, device) for item in value)
    return value


class Recorder:
    """A flagos_python kernel that records the size of each call (largest tensor argument,
    first tensor's dtype) and computes the result on CPU, so it calls no flagos operator."""

    def __init__(self, compute) -> None:
        self.compute = compute
        self.calls: list[tuple[int, torch.dtype]] = []

    def __call__(self, *args, **kwargs):
        found = tensors(args)
        self.calls.append((max(t.numel() for t in found), found[0].dtype))
        result = self.compute(*moved(args, "cpu"), **kwargs)
        return moved(result, found[0].device)


@pytest.fixture
def python_kernel() -> Iterator[Callable]:
    registered: list[str] = []

    def register(op: str, compute) -> Recorder:
        kernel = Recorder(compute)
        routing.register_python_kernel(op, kernel)
        registered.append(op)
        return kernel

    yield register
    for op in registered:
        routing.register_python_kernel(op, None)


# ---- grammar ----


def test_rules_parse_with_their_conditions(tmp_path):
    path = write(
        tmp_path,
        "t.conf",
        """
        relu = NATIVE
        relu [numel >= 1_024] = flagos_python   # a comment
        aten::mm.default[dtype = float16|bfloat16, numel < 4096]=flagos_python
        """,
    )
    entries = routing.parse_table(path)
    assert [(op, r, line, cond) for op, r, _, line, cond in entries] == [
        ("aten::relu", NATIVE, 2, ""),
        ("aten::relu", "flagos_python", 3, "numel >= 1_024"),
        ("aten::mm", "flagos_python", 4, "dtype = float16|bfloat16, numel < 4096"),
    ]


def test_rule_to_an_unavailable_route_names_the_switch(tmp_path):
    path = write(tmp_path, "t.conf", "relu [numel >= 5] = flaggems_cpp\n")
    with pytest.raises(RuntimeError, match=r"aten::relu \[numel >= 5\] = flaggems_cpp: .*CPP=1"):
        routing.parse_table(path)


def test_a_table_with_an_error_changes_nothing(table, tmp_path):
    table("relu [numel >= 100] = flagos_python\n")
    before = routing.active_table()
    bad = write(
        tmp_path, "bad.conf", "relu [numel >= 100] = flagos_python\nmm [numel ! 3] = NATIVE\n"
    )
    with pytest.raises(RuntimeError, match="bad.conf:2"):
        routing.load_table(bad)
    assert routing.active_table() == before
    assert routing.get_route("relu", numel=100) == "flagos_python"


# ---- what a call takes ----


def test_calls_take_the_route_of_their_size(table, python_kernel):
    kernel = python_kernel("relu", torch.relu)
    path = table(
        """
        relu = NATIVE
        relu [numel >= 1000] = flagos_python
        relu [numel > 100_000] = NATIVE      # later rules win where they overlap
        """
    )
    sizes = [1, 999, 1000, 5000, 100_000, 100_001, 400_000]
    routing.reset_stats()
    for n in sizes:
        x = torch.randn(n)
        assert torch.equal(torch.relu(x.to("flagos")).cpu(), torch.relu(x))
    assert [n for n, _ in kernel.calls] == [1000, 5000, 100_000]
    assert routing.stats()["aten::relu"] == {"flagos_python": 3, NATIVE: 4}
    assert routing.route_rules("relu") == [
        ("numel >= 1000", "flagos_python", f"{path}:3"),
        ("numel > 100_000", NATIVE, f"{path}:4"),
    ]
    assert routing.get_route("relu") == NATIVE
    assert [routing.get_route("relu", numel=n) for n in (999, 1000, 100_000, 100_001)] == [
        NATIVE,
        "flagos_python",
        "flagos_python",
        NATIVE,
    ]
    assert routing.route_origin("relu") == f"table {path}:2"


def boxed_unary() -> str:
    """A unary operator that reaches the boxed router on this build (no fast kernel, no flagos
    kernel of its own)."""
    fast = routing.fast_operators()
    for op in ("sin", "cos", "erf", "expm1", "log1p", "atan"):
        if f"aten::{op}" not in fast and routing.reaches_router(op):
            return op
    raise AssertionError(f"every candidate has a fast kernel here: {fast}")


@pytest.mark.parametrize("kind", ["fast", "boxed"])
def test_fast_and_boxed_operators_choose_alike(table, python_kernel, kind):
    """relu has an unboxed fast kernel that measures its arguments itself; a boxed operator
    reaches the router, which measures the stack."""
    op = "relu" if kind == "fast" else boxed_unary()
    assert (f"aten::{op}" in routing.fast_operators()) == (kind == "fast")
    fn = getattr(torch, op)
    kernel = python_kernel(op, fn)
    table(f"{op} [numel >= 100, numel <= 200] = flagos_python\n")
    for n in (99, 100, 200, 201):
        x = torch.randn(n)
        torch.testing.assert_close(fn(x.to("flagos")).cpu(), fn(x))  # GPU sin: last bits differ
    assert [n for n, _ in kernel.calls] == [100, 200]


def test_dtype_conditions(table, python_kernel):
    kernel = python_kernel("add.Tensor", torch.add)
    table("add.Tensor [dtype = float64|int64] = flagos_python\n")
    for dtype in (torch.float32, torch.float64, torch.int64, torch.float16):
        a = torch.arange(6, dtype=dtype).reshape(2, 3)
        got = a.to("flagos") + a.to("flagos")
        assert torch.equal(got.cpu(), a + a)
    assert [d for _, d in kernel.calls] == [torch.float64, torch.int64]
    assert routing.get_route("add.Tensor", dtype=torch.float64) == "flagos_python"
    assert routing.get_route("add.Tensor", dtype="float32") == NATIVE
    # Without a plain line, calls that meet no rule take the default route.
    assert routing.route_origin("add.Tensor") == "default"


def test_dtype_is_the_first_floating_point_argument(table, python_kernel):
    """torch.where(cond, a, b): the rule's dtype is a's, not the bool condition's (the fast
    kernel of where measures unboxed arguments; the boxed router measures the stack alike)."""
    kernel = python_kernel("where.self", torch.where)
    table("where.self [dtype = float64] = flagos_python\n")
    cond = torch.tensor([True, False, True])
    for dtype in (torch.float64, torch.float32):
        a, b = torch.arange(3, dtype=dtype), -torch.arange(3, dtype=dtype)
        got = torch.where(cond.to("flagos"), a.to("flagos"), b.to("flagos"))
        assert torch.equal(got.cpu(), torch.where(cond, a, b))
    assert len(kernel.calls) == 1


def test_numel_is_the_largest_tensor_argument(table, python_kernel):
    add = python_kernel("add.Tensor", torch.add)
    cat = python_kernel("cat", torch.cat)
    index = python_kernel(
        "index.Tensor", lambda x, indices: torch.ops.aten.index.Tensor(x, indices)
    )
    table(
        """
        add.Tensor [numel >= 64] = flagos_python
        cat [numel >= 64] = flagos_python
        index.Tensor [numel >= 64] = flagos_python
        """
    )
    small, big = torch.randn(8), torch.randn(8, 8)
    f_small, f_big = small.to("flagos"), big.to("flagos")
    assert torch.equal((f_small + f_big).cpu(), small + big)  # broadcast: the larger counts
    assert torch.equal((f_small + f_small).cpu(), small + small)
    assert add.calls == [(64, torch.float32)]
    assert torch.equal(
        torch.cat([f_small, f_big.flatten()]).cpu(), torch.cat([small, big.flatten()])
    )
    assert torch.equal(torch.cat([f_small, f_small]).cpu(), torch.cat([small, small]))
    assert [n for n, _ in cat.calls] == [64]
    rows = torch.tensor([0, 3, 5])
    assert torch.equal(f_big[rows.to("flagos")].cpu(), big[rows])  # Tensor?[]: self counts
    assert torch.equal(f_small[rows.to("flagos")].cpu(), small[rows])
    assert len(index.calls) == 1


def test_measure_call_is_what_the_router_measures(table, python_kernel):
    """routing.measure_call mirrors the router's measure (verify_routes writes its dtype
    conditions from it): each call below meets its rule exactly when get_route says so."""
    f = lambda *shape, dtype=torch.float32: torch.ones(*shape, dtype=dtype, device="flagos")  # noqa: E731
    calls = [
        ("add.Tensor", (f(8), f(8, 8)), {}),  # broadcast: the larger counts
        ("add.Tensor", (f(3, dtype=torch.float64), torch.tensor(2.0)), {}),  # 0-dim CPU joins
        ("cat", ([f(4, dtype=torch.float16), f(70, dtype=torch.float16)],), {}),
        ("where.self", (f(3, dtype=torch.bool), f(3, dtype=torch.float64), f(3)), {}),
        ("index.Tensor", (f(8, 8), [torch.tensor([0, 2], device="flagos")]), {}),
        ("bitwise_and.Tensor", (f(80, dtype=torch.int32), f(80, dtype=torch.int32)), {}),
        # 0.5 reaches the router as a wrapped float64 number, which sets no dtype.
        ("mul.Tensor", (f(5, dtype=torch.int64), 0.5), {}),
    ]
    want = {
        0: (64, "float32"),
        1: (3, "float64"),
        2: (70, "float16"),
        3: (3, "float64"),
        4: (64, "float32"),
        5: (80, "int32"),
        6: (5, "int64"),
    }
    assert {i: routing.measure_call(a, k) for i, (_, a, k) in enumerate(calls)} == want
    kernels = {op: python_kernel(op, flaggems.aten_overload(op)) for op, _, _ in calls}
    table(
        """
        add.Tensor [numel >= 64, dtype = float32] = flagos_python
        add.Tensor [dtype = float64] = flagos_python
        cat [numel >= 70, dtype = float16] = flagos_python
        where.self [dtype = float64] = flagos_python
        index.Tensor [numel >= 64] = flagos_python
        bitwise_and.Tensor [numel > 79, dtype = int32] = flagos_python
        mul.Tensor [dtype = int64] = flagos_python
        """
    )
    for op, args, kwargs in calls:
        before = len(kernels[op].calls)
        expected = routing.get_route(op, *routing.measure_call(args, kwargs))
        flaggems.aten_overload(op)(*args, **kwargs)
        took = "flagos_python" if len(kernels[op].calls) > before else NATIVE
        assert took == expected == "flagos_python", op
    assert routing.get_route("add.Tensor", *routing.measure_call((f(8), f(8)))) == NATIVE


def test_a_plain_line_drops_earlier_rules(table, tmp_path):
    write(
        tmp_path,
        "base.conf",
        "relu [numel >= 10] = flagos_python\nmm [numel >= 10] = flagos_python\n",
    )
    path = table("include base.conf\nrelu = NATIVE\nmm [numel >= 1000] = NATIVE\n")
    info = routing.active_table()
    assert "aten::relu" not in info["rules"] and info["table"]["aten::relu"] == NATIVE
    assert routing.route_rules("relu") == []
    assert [r for _, r, _ in info["rules"]["aten::mm"]] == ["flagos_python", NATIVE]
    assert routing.get_route("mm", numel=500) == "flagos_python"
    assert routing.get_route("mm", numel=5000) == NATIVE
    assert info["path"] == str(path)


def test_overrides_replace_the_rules(table, python_kernel):
    kernel = python_kernel("relu", torch.relu)
    table("relu [numel >= 100] = flagos_python\n")
    big = torch.randn(1000, device="flagos")
    with routing.route("relu", NATIVE):
        assert routing.route_rules("relu") == []
        assert routing.get_route("relu", numel=1000) == NATIVE
        torch.relu(big)
        assert kernel.calls == []
    assert routing.get_route("relu", numel=1000) == "flagos_python"
    torch.relu(big)
    assert len(kernel.calls) == 1


def test_autograd_through_a_rule_routed_operator(table, python_kernel):
    python_kernel("mul.Tensor", torch.mul)
    table("mul.Tensor [numel >= 16] = flagos_python\n")
    x = torch.randn(4, 8, requires_grad=True)
    fx = x.detach().to("flagos").requires_grad_()
    (fx * fx).sum().backward()
    (x * x).sum().backward()
    torch.testing.assert_close(fx.grad.cpu(), x.grad)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"numel": -1}, "numel must be >= 0, not -1"),
        ({"dtype": "float17"}, "unknown dtype 'float17'; valid dtypes:"),
    ],
)
def test_get_route_checks_its_arguments(kwargs, match):
    with pytest.raises(RuntimeError, match=match):
        routing.get_route("relu", **kwargs)


def test_reloading_tables_while_other_threads_call(table, python_kernel, tmp_path):
    """Calls on other threads while the table flips between rule sets: every result is right
    and every call takes one of the routes the tables name."""
    python_kernel("relu", torch.relu)
    a = write(tmp_path, "a.conf", "relu [numel >= 10] = flagos_python\n")
    b = write(tmp_path, "b.conf", "relu = NATIVE\nrelu [numel < 10] = flagos_python\n")
    x = torch.randn(64)
    expected = torch.relu(x)
    errors: list[BaseException] = []
    stop = threading.Event()

    def caller() -> None:
        fx = x.to("flagos")
        try:
            while not stop.is_set():
                assert torch.equal(torch.relu(fx).cpu(), expected)
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(200):
        routing.load_table(a if i % 2 == 0 else b)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []


# ---- fresh interpreters ----


def test_dispatch_log_and_info_show_rules(tmp_path):
    path = write(
        tmp_path,
        "t.conf",
        "include {}\nrelu [numel >= 100] = flagos_python\n".format(routing.active_table()["path"]),
    )
    r = run_python(
        textwrap.dedent(
            """
        import torch, torch_fl
        from torch_fl import routing, info
        routing.register_python_kernel("relu", lambda x: x.clamp_min(0))
        torch.relu(torch.randn(10, device="flagos"))
        torch.relu(torch.randn(1000, device="flagos"))
        print(info.report())
        """
        ),
        env={"FLAGOS_BACKEND_CONFIG": str(path), "FLAGOS_LOG": "dispatch"},
    )
    assert r.returncode == 0, r.stderr
    assert f"[flagos dispatch] aten::relu -> {NATIVE}" in r.stderr
    assert "[flagos dispatch] aten::relu -> flagos_python" in r.stderr
    assert f"aten::relu [numel >= 100] = flagos_python  ({path}:2)" in r.stdout


def test_environment_override_replaces_rules(tmp_path):
    path = write(tmp_path, "t.conf", "relu [numel >= 100] = flagos_python\n")
    r = run_python(
        textwrap.dedent(
            """
        from torch_fl import routing
        print(routing.get_route("relu", numel=1000), routing.route_rules("relu"))
        """
        ),
        env={"FLAGOS_BACKEND_CONFIG": str(path), "FLAGOS_OP_relu": NATIVE},
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [NATIVE, "[]"]
