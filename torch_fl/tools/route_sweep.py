"""Time operators on several routes across sizes and write the size rules that route each call
to the fastest correct one.

    python -m torch_fl.tools.route_sweep --out torch_fl/configs/size_rules_cuda.conf

For each operator of the sweep's catalog, dtype and size (the element count of the call's
largest tensor argument, as size rules measure it), the same call is made on flagos tensors
on every route of --routes, interleaved round by round, and the median time per call is
kept. A route whose result differs from the first route's, on the sweep's contiguous inputs or
on the transposed, broadcast, strided and unaligned layouts verify_routes checks, is left out at
that point. The winner at a point is the route the table in force already takes there unless
another is faster by more than --tolerance; where the winner differs, a rule is written:

    include backends_flaggems.conf
    relu [dtype = float16, numel < 262144] = cuda

A size between two measured points takes the smaller point's winner, a size below the
smallest the first point's, above the largest the last point's. The file includes the table
that was in force (so it works as FLAGOS_BACKEND_CONFIG or with torch_fl.routing.load_table)
and records every median it decided on in comments.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

import torch_fl
from torch_fl import flaggems, routing
from torch_fl.flagos._device import on_cpu_accelerator
from torch_fl.tools._verify._cases import VARIANTS, place

Inputs = tuple  # the positional arguments of one call


@dataclass(frozen=True)
class SweepOp:
    """An operator of the catalog and how to make a call of it at a given numel."""

    name: str  # as torch_fl.routing names it
    make: Callable[[int, torch.dtype, torch.device], Inputs]
    call: Callable[..., object]


def _rows_cols(numel: int) -> tuple[int, int]:
    cols = min(numel, 1024)
    return max(1, numel // cols), cols


def _vector(numel: int, dtype: torch.dtype, device: torch.device) -> Inputs:
    return (torch.randn(numel, dtype=dtype, device=device),)


def _positive(numel: int, dtype: torch.dtype, device: torch.device) -> Inputs:
    return (torch.rand(numel, dtype=dtype, device=device) + 0.5,)


def _pair(numel: int, dtype: torch.dtype, device: torch.device) -> Inputs:
    return _vector(numel, dtype, device) + _vector(numel, dtype, device)


def _matrix(numel: int, dtype: torch.dtype, device: torch.device) -> Inputs:
    return (torch.randn(_rows_cols(numel), dtype=dtype, device=device),)


def _square_pair(numel: int, dtype: torch.dtype, device: torch.device) -> Inputs:
    side = max(1, math.isqrt(numel))
    return tuple(torch.randn(side, side, dtype=dtype, device=device) / side**0.5 for _ in "ab")


def _layer_norm(numel: int, dtype: torch.dtype, device: torch.device) -> Inputs:
    (x,) = _matrix(numel, dtype, device)
    cols = x.shape[-1]
    return (
        x,
        torch.randn(cols, dtype=dtype, device=device),
        torch.randn(cols, dtype=dtype, device=device),
    )


def _unary(name: str, make: Callable = _vector) -> SweepOp:
    overload = getattr(torch.ops.aten, name).default
    return SweepOp(name, make, lambda x: overload(x))


aten = torch.ops.aten
CATALOG: dict[str, SweepOp] = {
    op.name: op
    for op in (
        _unary("relu"),
        _unary("abs"),
        _unary("neg"),
        _unary("exp"),
        _unary("sigmoid"),
        _unary("tanh"),
        _unary("silu"),
        _unary("gelu"),
        _unary("rsqrt", _positive),
        SweepOp("add.Tensor", _pair, lambda a, b: aten.add.Tensor(a, b)),
        SweepOp("sub.Tensor", _pair, lambda a, b: aten.sub.Tensor(a, b)),
        SweepOp("mul.Tensor", _pair, lambda a, b: aten.mul.Tensor(a, b)),
        SweepOp("div.Tensor", _pair, lambda a, b: aten.div.Tensor(a, b)),
        SweepOp("sum.dim_IntList", _matrix, lambda x: aten.sum.dim_IntList(x, [-1])),
        SweepOp("amax", _matrix, lambda x: aten.amax.default(x, [-1])),
        SweepOp("_softmax", _matrix, lambda x: aten._softmax.default(x, -1, False)),
        SweepOp(
            "native_layer_norm",
            _layer_norm,
            lambda x, w, b: aten.native_layer_norm.default(x, [x.shape[-1]], w, b, 1e-5),
        ),
        SweepOp("mm", _square_pair, lambda a, b: aten.mm.default(a, b)),
    )
}


# ---- deciding ----


@dataclass
class Point:
    """One (operator, dtype, numel) of the sweep."""

    numel: int
    in_force: str  # the route the table in force takes for such a call
    medians: dict[str, float] = field(default_factory=dict)  # route -> seconds per call
    left_out: dict[str, str] = field(default_factory=dict)  # route -> why

    def winner(self, tolerance: float) -> str | None:
        """The route in force unless another is faster by more than `tolerance`; None when no
        route ran."""
        if not self.medians:
            return None
        best = min(self.medians, key=self.medians.__getitem__)
        incumbent = self.medians.get(self.in_force)
        if incumbent is not None and incumbent <= self.medians[best] * (1 + tolerance):
            return self.in_force
        return best


def rules_for(
    points: Sequence[Point], dtype: str, tolerance: float
) -> list[tuple[str, str, int, int | None]]:
    """(condition, route, first numel, end numel or None) for every run of consecutive points
    whose winner differs from the route in force. `points` are sorted by numel."""
    rules: list[tuple[str, str, int, int | None]] = []
    winners = [p.winner(tolerance) for p in points]
    i = 0
    while i < len(points):
        w = winners[i]
        if w is None or w == points[i].in_force:
            i += 1
            continue
        j = i
        while j + 1 < len(points) and winners[j + 1] == w and points[j + 1].in_force != w:
            j += 1
        lo = 0 if i == 0 else points[i].numel
        hi = points[j + 1].numel if j + 1 < len(points) else None
        parts = [f"dtype = {dtype}"]
        if lo > 0:
            parts.append(f"numel >= {lo}")
        if hi is not None:
            parts.append(f"numel < {hi}")
        rules.append((", ".join(parts), w, lo, hi))
        i = j + 1
    return rules


# ---- measuring ----


def _sync() -> None:
    torch.flagos.synchronize()


def _close(actual: object, expected: object) -> str | None:
    """None when the results match, else why not."""
    a = actual if isinstance(actual, tuple) else (actual,)
    e = expected if isinstance(expected, tuple) else (expected,)
    if len(a) != len(e):
        return f"{len(a)} results, expected {len(e)}"
    for x, y in zip(a, e, strict=True):
        if isinstance(y, torch.Tensor) and y.numel() == 0:
            continue
        try:
            torch.testing.assert_close(x.cpu(), y.cpu(), equal_nan=True)
        except AssertionError as err:
            return "mismatch: " + str(err).splitlines()[0]
    return None


def _layouts_differ(op: SweepOp, args: Inputs, reference: str, route: str) -> str | None:
    """None when `route` matches `reference` on every input layout verify_routes checks
    (transposed, broadcast, strided, unaligned), else which one differs: a rule must not send
    calls to a kernel that is right only on contiguous tensors."""
    host = tuple(a.cpu() if isinstance(a, torch.Tensor) else a for a in args)
    for variant in VARIANTS[1:]:
        placed = tuple(
            place(a, variant, str(args[0].device), written=False)
            if isinstance(a, torch.Tensor)
            else a
            for a in host
        )
        results = []
        try:
            for r in (reference, route):
                with routing.route(op.name, r):
                    results.append(op.call(*placed))
        except Exception as err:  # noqa: BLE001 - a failure on one layout leaves the route out
            return f"{variant} inputs: {type(err).__name__}: {str(err).splitlines()[0][:160]}"
        if (why := _close(results[1], results[0])) is not None:
            return f"{variant} inputs: {why}"
    return None


def measure(
    op: SweepOp,
    numel: int,
    dtype: torch.dtype,
    routes: Sequence[str],
    rounds: int,
    iters: int,
    device: torch.device,
) -> Point:
    """Times `op` at `numel` on each route (results checked against the first route's)."""
    point = Point(numel, routing.get_route(op.name, numel=numel, dtype=dtype))
    args = op.make(numel, dtype, device)
    expected = None
    runnable: list[str] = []
    canonical = routing._canonical(op.name)
    for r in routes:
        before = routing.stats().get(canonical, {}).get(r, 0)
        try:
            with routing.route(op.name, r):
                result = op.call(*args)  # the first call also warms up (imports, JIT)
                for _ in range(2):
                    op.call(*args)
                _sync()
        except Exception as err:  # noqa: BLE001 - any failure leaves the route out here
            point.left_out[r] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
            continue
        if routing.stats().get(canonical, {}).get(r, 0) - before < 3:
            point.left_out[r] = f"the calls did not run on {r}"
            continue
        if expected is None:
            expected = result
        elif why := _close(result, expected) or _layouts_differ(op, args, routes[0], r):
            point.left_out[r] = why
            continue
        runnable.append(r)
    samples: dict[str, list[float]] = {r: [] for r in runnable}
    for k in range(rounds):
        for r in runnable[k % len(runnable) :] + runnable[: k % len(runnable)]:
            with routing.route(op.name, r):
                _sync()
                start = time.perf_counter()
                for _ in range(iters):
                    op.call(*args)
                _sync()
                samples[r].append((time.perf_counter() - start) / iters)
    point.medians = {r: statistics.median(v) for r, v in samples.items()}
    return point


# ---- the table ----


def render(
    results: dict[tuple[str, str], list[Point]],
    base: Path | None,
    out: Path,
    tolerance: float,
    header: list[str],
) -> str:
    lines = ["# Size rules written by torch_fl.tools.route_sweep; rerun it rather than edit."]
    lines += [f"# {h}" for h in header]
    lines.append("# Medians in microseconds per call; * marks the route each point decided on.")
    if base is not None:
        lines.append(f"include {os.path.relpath(base, out.resolve().parent)}")
    for (name, dtype), points in results.items():
        lines.append("")
        for p in points:
            w = p.winner(tolerance)
            timings = ", ".join(
                f"{r} {m * 1e6:.1f}{'*' if r == w else ''}" for r, m in p.medians.items()
            )
            skipped = "".join(f"; {r} left out ({why})" for r, why in p.left_out.items())
            lines.append(
                f"# {name} {dtype} numel {p.numel} (in force: {p.in_force}): {timings}{skipped}"
            )
        for condition, route, _, _ in rules_for(points, dtype, tolerance):
            lines.append(f"{name} [{condition}] = {route}")
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torch_fl.tools.route_sweep", description=__doc__)
    p.add_argument("--out", type=Path, required=True, help="the table to write")
    p.add_argument("--json", type=Path, default=None, help="every median (JSON)")
    p.add_argument("--ops", default="", help=f"comma-separated (default all: {', '.join(CATALOG)})")
    p.add_argument(
        "--routes", default="", help="comma-separated (default: the zero-copy route, flagos_python)"
    )
    p.add_argument(
        "--dtypes",
        default="",
        help="comma-separated (default float32,float16,bfloat16; float32 on cpu)",
    )
    p.add_argument(
        "--sizes",
        default=",".join(str(4**k) for k in range(5, 13)),
        help="comma-separated element counts (default 4**5 .. 4**12)",
    )
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--iters", type=int, default=20, help="calls per timed sample")
    p.add_argument("--tolerance", type=float, default=0.05, help="how much faster a route must be")
    p.add_argument(
        "--base", type=Path, default=None, help="table to include (default: the one in force)"
    )
    p.add_argument("--no-base", action="store_true", help="include no table")
    p.add_argument("--device", default="flagos:0")
    return p


def _split(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    on_cpu = on_cpu_accelerator()
    ops = _split(args.ops) or list(CATALOG)
    unknown = [o for o in ops if o not in CATALOG]
    if unknown:
        print(
            f"route_sweep: no such operator in the catalog: {', '.join(unknown)}; "
            f"known: {', '.join(CATALOG)}",
            file=sys.stderr,
        )
        return 2
    unrouted = [o for o in ops if not routing.reaches_router(o)]
    if unrouted:  # a flagos or composite kernel serves them: no route to choose
        print(f"route_sweep: skipped (calls never reach the router): {', '.join(unrouted)}")
        ops = [o for o in ops if o not in unrouted]
    zero_copy = "cpu_fallback" if on_cpu else "cuda"
    routes = _split(args.routes) or [zero_copy, "flagos_python"]
    if "flagos_python" in routes and getattr(torch_fl.build_config, "BUILD_FLAGGEMS", False):
        # FlagGems for every swept operator, not only those the table sends it.
        flaggems.install(ops)
    available = routing.available_routes()  # route -> why this build cannot run it ('' if it can)
    unavailable = {r: available.get(r, "unknown route") for r in routes}
    bad = {r: why for r, why in unavailable.items() if why}
    if bad or len(routes) < 2:
        why = "; ".join(f"{r}: {w}" for r, w in bad.items()) or "name at least two routes"
        print(f"route_sweep: --routes {','.join(routes)}: {why}", file=sys.stderr)
        return 2
    dtype_names = _split(args.dtypes) or (
        ["float32"] if on_cpu else ["float32", "float16", "bfloat16"]
    )
    dtypes = []
    for name in dtype_names:
        dtype = getattr(torch, name, None)
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            print(
                f"route_sweep: --dtypes: '{name}' is not a floating-point torch dtype",
                file=sys.stderr,
            )
            return 2
        dtypes.append(dtype)
    try:
        sizes = sorted({int(s) for s in _split(args.sizes)})
    except ValueError:
        print(f"route_sweep: --sizes: '{args.sizes}' is not a list of integers", file=sys.stderr)
        return 2
    if not sizes or sizes[0] < 1:
        print("route_sweep: --sizes: give positive element counts", file=sys.stderr)
        return 2
    base = None if args.no_base else (args.base or Path(routing.active_table()["path"]))

    device = torch.device(args.device)
    results: dict[tuple[str, str], list[Point]] = {}
    for name in ops:
        for dtype in dtypes:
            dname = str(dtype).removeprefix("torch.")
            points = [
                measure(CATALOG[name], n, dtype, routes, args.rounds, args.iters, device)
                for n in sizes
            ]
            results[(name, dname)] = points
            for p in points:
                shown = ", ".join(f"{r} {m * 1e6:.1f}" for r, m in p.medians.items())
                print(
                    f"{name} {dname} {p.numel}: {shown} -> {p.winner(args.tolerance)}", flush=True
                )

    header = [
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"torch {torch.__version__}, "
        f"torch_fl {torch_fl.__version__}, accelerator {torch_fl.build_config.ACCELERATOR}, "
        f"{torch.flagos.get_device_name(device)}, {platform.node()}",
        "python -m torch_fl.tools.route_sweep "
        + shlex.join(argv if argv is not None else sys.argv[1:]),
        f"routes {', '.join(routes)}; {args.rounds} rounds of {args.iters} calls; "
        f"tolerance {args.tolerance}",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(render(results, base, args.out, args.tolerance, header))
    routing.parse_table(args.out)  # what we wrote must load
    if args.json is not None:
        report = [
            {
                "op": n,
                "dtype": d,
                "numel": p.numel,
                "in_force": p.in_force,
                "medians_s": p.medians,
                "left_out": p.left_out,
            }
            for (n, d), points in results.items()
            for p in points
        ]
        args.json.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
