"""One operator: run every case on the reference route and on flagos_python, compare, time."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from torch_fl import routing
from torch_fl.tools._verify._cases import Case

# Per result dtype (rtol, atol): FlagGems accumulates in another order than ATen.
TOLERANCES = {
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float64: (1e-7, 1e-7),
}


@dataclasses.dataclass
class Verdict:
    matched: bool
    cases: int = 0
    skipped: int = 0  # cases the reference route itself rejects
    failure: str = ""  # "<case>: <what differs>"
    # The dtypes the router measures (routing.measure_call) on the cases that matched: the
    # table routes only these, so an unverified dtype (float64, say) keeps the reference route.
    dtypes: set[str] = dataclasses.field(default_factory=set)
    # Dtypes left out because a case in them differed: dtype -> its first failure. Only the
    # dtypes checked on contiguous inputs alone can be left out this way; a failure in float32,
    # whose cases cover every layout, fails the whole operator.
    excluded: dict[str, str] = dataclasses.field(default_factory=dict)
    ref_us: float = 0.0
    python_us: float = 0.0
    timed_case: str = ""


def _results(overload: Callable, args: tuple, kwargs: dict) -> list[Any]:
    out = overload(*args, **kwargs)
    # Written arguments count as results too: an in-place/out= kernel must write them.
    flat = tree_flatten(out)[0] + tree_flatten((args, kwargs))[0]
    torch.flagos.synchronize()
    return [v.detach().cpu() if isinstance(v, torch.Tensor) else v for v in flat]


def _differs(got: Any, want: Any) -> str:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"got {type(got).__name__}, expected a tensor"
        if got.dtype != want.dtype:
            return f"dtype {got.dtype} != {want.dtype}"
        if got.shape != want.shape:
            return f"shape {list(got.shape)} != {list(want.shape)}"
        if want.is_floating_point():
            rtol, atol = TOLERANCES.get(want.dtype, (1e-5, 1e-6))
            try:
                torch.testing.assert_close(
                    got, want, rtol=rtol, atol=atol, equal_nan=True, check_stride=False
                )
            except AssertionError as exc:
                lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
                return "; ".join(lines[:3])
            return ""
        if not torch.equal(got, want):
            return f"{int((got != want).sum())} of {want.numel()} elements differ"
        return ""
    if isinstance(want, float) and isinstance(got, float):
        return "" if abs(got - want) <= 1e-5 * max(1.0, abs(want)) else f"{got} != {want}"
    return "" if got == want else f"{got!r} != {want!r}"


def compare(op: str, overload: Callable, cases: list[Case], ref_route: str) -> Verdict:
    """Every case on both routes. A difference in float32 or in another layout than contiguous
    fails the operator; one in another dtype (checked contiguous only) leaves that dtype out,
    so a kernel wrong in bfloat16 alone is still routed for the dtypes it gets right."""
    verdict = Verdict(matched=True)
    failed: set[str] = set()  # measured dtypes of the cases that differed
    for case in cases:
        if case.dtype in verdict.excluded:
            continue  # already left out
        made = case.make()
        try:
            with routing.route(op, ref_route):
                want = _results(overload, *made)
        except Exception:
            verdict.skipped += 1  # the reference rejects this input: not a FlagGems case
            continue
        verdict.cases += 1
        measured = routing.measure_call(*made)[1]
        problem = _problem(op, overload, case, want)
        if not problem:
            if measured is not None:
                verdict.dtypes.add(measured)
            continue
        failure = f"{case.name}: {problem}"
        if case.dtype == "float32" or case.variant != "contiguous":
            verdict.matched = False
            verdict.failure = failure
            return verdict
        verdict.excluded[case.dtype] = failure
        failed.add(measured or case.dtype)
    verdict.dtypes -= failed
    if verdict.excluded and not verdict.dtypes:
        # Nothing verified is left; an empty dtype list would route every dtype.
        verdict.matched = False
        verdict.failure = next(iter(verdict.excluded.values()))
    return verdict


def _problem(op: str, overload: Callable, case: Case, want: list[Any]) -> str:
    """What differs when the case runs on flagos_python ("" when nothing does)."""
    try:
        with routing.route(op, "flagos_python"):
            got = _results(overload, *case.make())
    except Exception as exc:
        message = str(exc).splitlines()[0] if str(exc) else ""
        return f"raised {type(exc).__name__}: {message[:200]}"
    if len(got) != len(want):
        return f"{len(got)} results, expected {len(want)}"
    differs = (d for g, w in zip(got, want, strict=True) if (d := _differs(g, w)))
    return next(differs, "")[:300]


def time_routes(
    op: str, overload: Callable, case: Case, ref_route: str, reps: int, calls_per_rep: int
) -> tuple[float, float]:
    """Median microseconds per call of the reference route and flagos_python, interleaved
    (alternating which goes first), synchronising around each batch."""
    args, kwargs = case.make()
    samples: dict[str, list[float]] = {ref_route: [], "flagos_python": []}
    order = [ref_route, "flagos_python"]
    for name in order:  # warm-up: compile, tune, load FlagGems
        with routing.route(op, name):
            for _ in range(3):
                overload(*args, **kwargs)
    for rep in range(reps):
        for name in order if rep % 2 == 0 else order[::-1]:
            with routing.route(op, name):
                torch.flagos.synchronize()
                start = time.perf_counter()
                for _ in range(calls_per_rep):
                    overload(*args, **kwargs)
                torch.flagos.synchronize()
                samples[name].append((time.perf_counter() - start) / calls_per_rep * 1e6)
    return statistics.median(samples[ref_route]), statistics.median(samples["flagos_python"])
