"""torch_fl.tools.route_sweep: decisions from timings, and a whole sweep on this build's routes
whose table routes calls as it measured."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

import torch_fl
from torch_fl import routing
from torch_fl.tools import route_sweep
from torch_fl.tools.route_sweep import Point, rules_for

NATIVE = "cpu_fallback" if torch_fl.build_config.ACCELERATOR == "cpu" else "cuda"
PY = "flagos_python"


def points(in_force: str, *timings: tuple[int, float, float]) -> list[Point]:
    """Points from (numel, native seconds, flagos_python seconds)."""
    return [Point(n, in_force, {NATIVE: a, PY: b}) for n, a, b in timings]


# ---- deciding ----


def test_a_crossover_becomes_one_rule_from_the_first_faster_point():
    ps = points(NATIVE, (1024, 1.0, 3.0), (4096, 1.0, 2.0), (16384, 2.0, 1.0), (65536, 8.0, 2.0))
    assert rules_for(ps, "float16", 0.05) == [("dtype = float16, numel >= 16384", PY, 16384, None)]


def test_the_route_in_force_stays_within_the_tolerance():
    ps = points(NATIVE, (1024, 1.00, 0.97), (4096, 1.0, 0.5))
    assert rules_for(ps, "float32", 0.05) == [("dtype = float32, numel >= 4096", PY, 4096, None)]
    assert rules_for(ps, "float32", 1.5) == []


def test_runs_below_the_first_point_and_between_points():
    # flagos_python in force; native wins at the small end and again in the middle.
    ps = points(
        PY,
        (1024, 1.0, 5.0),
        (4096, 1.0, 5.0),
        (16384, 5.0, 1.0),
        (65536, 1.0, 5.0),
        (262144, 5.0, 1.0),
    )
    assert rules_for(ps, "bfloat16", 0.05) == [
        ("dtype = bfloat16, numel < 16384", NATIVE, 0, 16384),
        ("dtype = bfloat16, numel >= 65536, numel < 262144", NATIVE, 65536, 262144),
    ]


def test_points_where_a_rule_already_routes_need_none():
    ps = [Point(1024, NATIVE, {NATIVE: 1.0, PY: 2.0}), Point(4096, PY, {NATIVE: 2.0, PY: 1.0})]
    assert rules_for(ps, "float32", 0.05) == []


def test_a_point_where_no_route_ran_decides_nothing():
    ps = [Point(1024, NATIVE, {}, {PY: "mismatch"}), Point(4096, NATIVE, {NATIVE: 2.0, PY: 1.0})]
    assert ps[0].winner(0.05) is None
    assert rules_for(ps, "float32", 0.05) == [("dtype = float32, numel >= 4096", PY, 4096, None)]


# ---- a whole sweep ----


@pytest.fixture
def restore_routing():
    yield
    routing.register_python_kernel("relu", None)
    routing.load_table()


def test_sweep_writes_a_table_that_routes_as_measured(tmp_path: Path, restore_routing):
    """flagos_python in force for relu, with a kernel 5 ms slower below 5000 elements: the
    sweep must send those sizes to the native route and keep the rest (the tolerance is wide
    enough that only the 5 ms decides)."""

    def relu(x: torch.Tensor) -> torch.Tensor:
        if x.numel() < 5000:
            time.sleep(0.005)
        with routing.route("relu", NATIVE):
            return torch.relu(x)

    routing.register_python_kernel("relu", relu)
    base = tmp_path / "base.conf"
    base.write_text(f"include {routing.active_table()['path']}\nrelu = {PY}\n")
    routing.load_table(base)
    out = tmp_path / "swept" / "rules.conf"
    rc = route_sweep.main(
        [
            "--out", str(out), "--ops", "relu", "--dtypes", "float32",
            "--sizes", "1024,4096,16384,65536", "--rounds", "3", "--iters", "3",
            "--tolerance", "30",
        ]
    )  # fmt: skip
    assert rc == 0
    text = out.read_text()
    assert "include ../base.conf" in text
    assert f"relu [dtype = float32, numel < 16384] = {NATIVE}" in text.splitlines()
    assert "# relu float32 numel 1024 (in force: flagos_python): " in text
    routing.load_table(out)
    assert [routing.get_route("relu", numel=n, dtype="float32") for n in (1, 16383, 16384)] == [
        NATIVE,
        NATIVE,
        PY,
    ]
    assert routing.get_route("relu", numel=100, dtype="float16") == PY  # a dtype not swept


def test_a_route_with_wrong_results_is_left_out(tmp_path: Path, restore_routing):
    routing.register_python_kernel("relu", lambda x: x.abs())  # not relu
    out = tmp_path / "rules.conf"
    rc = route_sweep.main(
        ["--out", str(out), "--ops", "relu", "--dtypes", "float32", "--sizes", "64",
         "--rounds", "2", "--iters", "2", "--routes", f"{NATIVE},{PY}", "--no-base"]
    )  # fmt: skip
    assert rc == 0
    text = out.read_text()
    assert f"{PY} left out (mismatch: " in text
    assert "include" not in text and "relu [" not in text


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--ops", "relu,frobnicate"], "no such operator in the catalog: frobnicate; known: relu"),
        (["--routes", "flaggems_cpp,flagos_python"], "flaggems_cpp: route 'flaggems_cpp' needs"),
        (["--routes", "flagos_python"], "name at least two routes"),
        (["--dtypes", "int64"], "'int64' is not a floating-point torch dtype"),
        (["--sizes", "10,x"], "is not a list of integers"),
        (["--sizes", "0,10"], "give positive element counts"),
    ],
)
def test_bad_arguments_are_reported(tmp_path: Path, capsys, argv, message):
    assert route_sweep.main(["--out", str(tmp_path / "x.conf"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.conf").exists()


def test_every_catalog_operator_runs_on_the_native_route():
    """Each catalog entry makes a call of its operator at a few sizes (so a sweep on a GPU
    does not stop at a typo)."""
    device = torch.device("flagos:0")
    for op in route_sweep.CATALOG.values():
        for numel in (1, 1000):
            args = op.make(numel, torch.float32, device)
            assert max(a.numel() for a in args) <= max(numel, 1)
            op.call(*args)


def test_the_written_table_routes_every_point_as_decided(tmp_path: Path, restore_routing):
    """The routes this build has, whatever they are (FlagGems' kernels on a GPU build with
    FlagGems; on the cpu accelerator flagos_python has no kernel and is left out): after
    loading the table, every measured point takes the route the sweep starred for it."""
    out = tmp_path / "rules.conf"
    dtype = "float32" if torch_fl.build_config.ACCELERATOR == "cpu" else "float16"
    argv = ["--out", str(out), "--ops", "relu,add.Tensor,mm", "--dtypes", dtype]
    argv += ["--sizes", "1024,65536,1048576", "--rounds", "5", "--iters", "10"]
    assert route_sweep.main(argv) == 0
    routing.load_table(out)
    decided = 0
    for line in out.read_text().splitlines():
        if not line.startswith("# ") or " numel " not in line:
            continue
        head, timings = line[2:].split("): ", 1)
        op, dt, _, numel = head.split(" (")[0].split()
        starred = [t.split()[0] for t in timings.split(";")[0].split(", ") if t.endswith("*")]
        if starred:
            decided += 1
            assert routing.get_route(op, numel=int(numel), dtype=dt) == starred[0], line
    assert decided == 9


def test_operators_that_never_reach_the_router_are_skipped(tmp_path: Path, capsys, restore_routing):
    """abs is served by a composite kernel on flagos: naming a route for it changes nothing, so
    timing its 'routes' would only measure noise."""
    assert not routing.reaches_router("abs")
    routing.register_python_kernel("relu", torch.relu)
    out = tmp_path / "rules.conf"
    argv = ["--out", str(out), "--ops", "abs,relu", "--dtypes", "float32", "--sizes", "64"]
    assert route_sweep.main([*argv, "--rounds", "2", "--iters", "2", "--no-base"]) == 0
    assert "skipped (calls never reach the router): abs" in capsys.readouterr().out
    text = out.read_text()
    assert "# abs" not in text and "abs [" not in text and "# relu float32 numel 64" in text


def test_a_route_right_only_on_contiguous_inputs_is_left_out(tmp_path: Path, restore_routing):
    """A kernel that reads its input as if it were contiguous (wrong on transposed, strided or
    unaligned views) matches on the sweep's own inputs; the layout checks catch it."""

    def relu_of_the_buffer(x: torch.Tensor) -> torch.Tensor:
        if 0 in x.stride():  # right on broadcast inputs, so the strided check must catch it
            return torch.relu(x)
        flat = torch.as_strided(x, (x.numel(),), (1,), x.storage_offset())
        return torch.relu(flat.clone()).view(x.shape)

    routing.register_python_kernel("relu", relu_of_the_buffer)
    out = tmp_path / "rules.conf"
    argv = ["--out", str(out), "--ops", "relu", "--dtypes", "float32", "--sizes", "4096"]
    assert route_sweep.main([*argv, "--rounds", "2", "--iters", "2", "--no-base"]) == 0
    text = out.read_text()
    assert f"{PY} left out (strided inputs: mismatch: " in text
    assert "relu [" not in text
