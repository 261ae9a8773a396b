"""Verify FlagGems operator by operator against the reference route and write the routing
table that sends FlagGems only the operators it serves correctly and no slower.

    python -m torch_fl.tools.verify_routes --out torch_fl/configs/backends_flaggems.conf

For every ATen overload in FlagGems' `_FULL_CONFIG` (as the router would use it), calls
recorded from real code (a small training workload, then torch's OpInfo samples; backward
overloads come from the backward passes) are replayed on flagos tensors once on the reference
route (`cuda`; `cpu_fallback` on the cpu accelerator) and once on `flagos_python`, under
contiguous, transposed, broadcast, strided and unaligned inputs and several dtypes. An
operator is routed to FlagGems when every case matches and its median time per call is at
most the reference's times (1 + --slower-tolerance), for the dtypes its cases covered; a
dtype checked on contiguous inputs only (all but float32) whose case differs is left out
instead of failing the operator. View, CompositeImplicitAutograd and random
operators are never routed. Results are appended to a JSON-lines state file as they come, and
the table is rewritten after every operator, so --resume continues a run that ran out of time
or crashed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import torch_fl
from torch_fl import _C, flaggems, routing
from torch_fl.flaggems._adapt import SignatureMismatch
from torch_fl.tools._verify import _cases, _check, _classify, _conf, _record
from torch_fl.tools._verify._state import State

EXIT_DEVICE_FAULT = 3


class OpTimeout(BaseException):
    """An operator's time is up. Not an Exception: the comparison treats an Exception raised by
    a kernel as that case's failure, and a timeout must end the operator instead."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torch_fl.tools.verify_routes", description=__doc__)
    p.add_argument("--out", type=Path, default=routing.CONFIG_DIR / "backends_flaggems.conf")
    p.add_argument("--json", type=Path, default=None, help="full report (JSON)")
    p.add_argument("--state", type=Path, default=Path("verify_routes.state.jsonl"))
    p.add_argument("--resume", action="store_true", help="keep the results in --state")
    p.add_argument("--ops", default="", help="comma-separated operators (default: all)")
    p.add_argument("--time-budget", type=float, default=240.0, help="seconds for the whole run")
    p.add_argument("--op-timeout", type=float, default=30.0, help="seconds per operator")
    p.add_argument("--record-budget", type=float, default=60.0, help="seconds for recording")
    p.add_argument("--no-opinfo", action="store_true", help="record from the workload only")
    p.add_argument("--samples-per-op", type=int, default=2)
    p.add_argument("--dtypes", default="float32,float16,bfloat16")
    p.add_argument("--variants", default=",".join(_cases.VARIANTS))
    p.add_argument("--slower-tolerance", type=float, default=0.05)
    p.add_argument("--reps", type=int, default=15, help="timing repetitions (medians)")
    p.add_argument("--calls-per-rep", type=int, default=10)
    return p


def _versions() -> dict[str, str]:
    out = {"torch": torch.__version__, "python": platform.python_version()}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = "not installed"
    gems = flaggems.load()
    out["flag_gems"] = str(getattr(gems, "__version__", "?"))
    out["flag_gems_vendor"] = str(getattr(gems, "vendor_name", "?"))
    if torch_fl.build_config.ACCELERATOR == "cpu":
        out["device"] = "cpu accelerator"
    else:
        out["device"] = torch.cuda.get_device_name(0)
    return out


def _provenance(argv: list[str], versions: dict[str, str], args: argparse.Namespace) -> list:
    command = "python -m torch_fl.tools.verify_routes " + shlex.join(argv)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return [
        "Command: " + command.strip(),
        f"Date: {date}; device: {versions['device']}",
        f"torch {versions['torch']}, triton {versions['triton']}, flag-gems "
        f"{versions['flag_gems']} (vendor {versions['flag_gems_vendor']}), "
        f"python {versions['python']}",
        f"Criteria: every case matches (variants {args.variants};",
        f"dtypes {args.dtypes}; up to {args.samples_per_op} recorded calls per operator) and",
        f"the median time per call is at most the reference's x {1 + args.slower_tolerance:g}.",
    ]


def _empty_table() -> None:
    """Verification starts from no table: inputs are built on default routes only."""
    path = Path(tempfile.mkdtemp()) / "empty.conf"
    path.write_text("# verify_routes: no table\n")
    _C._routing_load(str(path), "verify_routes (no table)")


def _is_device_fault(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}"
    return any(s in text for s in ("CUDA error", "cudaError", "illegal memory", "device-side"))


def _verify_one(
    op: str, calls: list[_record.Call], ref_route: str, args: argparse.Namespace
) -> dict[str, Any]:
    overload = flaggems.aten_overload(op)
    assert overload is not None
    try:
        fn = flaggems.resolve(op)
    except SignatureMismatch as exc:
        return {"decision": ref_route, "category": "signature", "detail": str(exc)[:300]}
    if not calls:
        return {
            "decision": ref_route,
            "category": "no-samples",
            "detail": "no recorded call (neither the workload nor OpInfo samples use it)",
        }
    cases = _cases.cases(
        overload, calls, "flagos", args.dtypes.split(","), args.variants.split(",")
    )
    previous = _C._routing_python_kernel(op)
    routing.register_python_kernel(op, fn)
    try:
        verdict = _check.compare(op, overload, cases, ref_route)
        if not verdict.matched:
            return {"decision": ref_route, "category": "mismatch", "detail": verdict.failure}
        if verdict.cases == 0:
            return {
                "decision": ref_route,
                "category": "no-samples",
                "detail": f"the {ref_route} route rejected all {verdict.skipped} cases",
            }
        timed = max(
            (c for c in cases if c.variant == "contiguous" and c.dtype == "float32"),
            key=lambda c: sum(t.numel() for t in _flat_tensors(c.make())),
            default=cases[0],
        )
        ref_us, py_us = _check.time_routes(
            op, overload, timed, ref_route, args.reps, args.calls_per_rep
        )
    finally:
        routing.register_python_kernel(op, previous)
    timing = {"ref_us": round(ref_us, 2), "flagos_python_us": round(py_us, 2), "case": timed.name}
    ratio = py_us / ref_us if ref_us > 0 else float("inf")
    base = {"cases": verdict.cases, "skipped_cases": verdict.skipped, "timing": timing}
    if ratio > 1 + args.slower_tolerance:
        detail = (
            f"slower by {100 * (ratio - 1):.0f}% (flagos_python {py_us:.1f} us vs {ref_route} "
            f"{ref_us:.1f} us per call, {timed.name})"
        )
        return {"decision": ref_route, "category": "slower", "detail": detail, **base}
    detail = f"matched {verdict.cases} cases; {py_us:.1f} us vs {ref_us:.1f} us per call"
    routed = {
        "decision": "flagos_python",
        "category": "routed",
        "detail": detail,
        "dtypes": _conf.dtype_order(verdict.dtypes),
        **base,
    }
    if verdict.excluded:
        routed["excluded_dtypes"] = verdict.excluded
        left_out = ", ".join(_conf.dtype_order(set(verdict.excluded)))
        routed["detail"] += f"; not in {left_out}, where a case differed"
    return routed


def _flat_tensors(made: tuple[tuple, dict]) -> list[torch.Tensor]:
    flat = torch.utils._pytree.tree_flatten(made)[0]
    return [t for t in flat if isinstance(t, torch.Tensor)]


def _alarm(seconds: float) -> None:
    def fire(signum: int, frame: Any) -> None:
        raise OpTimeout()

    signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    started = time.monotonic()
    ref_route = "cuda" if routing.available_routes()["cuda"] == "" else routing.default_route()
    _empty_table()
    versions = _versions()
    provenance = _provenance(argv, versions, args)
    catalog = flaggems.catalog()
    state = State(args.state, args.resume)

    wanted = sorted(catalog.entries)
    if args.ops:
        wanted = sorted({_C._routing_canonical_name(o.strip()) for o in args.ops.split(",")})
    for name, why in catalog.skipped.items():
        op = flaggems.canonical(name)
        if op not in state.results and (not args.ops or op in wanted):
            state.add({"op": op, "decision": ref_route, "category": "missing", "detail": why})
    testable = []
    for op in wanted:
        if op in state.results:
            continue
        if op not in catalog.entries:
            state.add(
                {
                    "op": op,
                    "decision": ref_route,
                    "category": "missing",
                    "detail": "FlagGems' _FULL_CONFIG has no entry for it",
                }
            )
        elif never := _classify.never_routed(op):
            state.add({"op": op, "decision": ref_route, "category": never[0], "detail": never[1]})
        else:
            testable.append(op)

    def flush() -> None:
        pending = [op for op in testable if op not in state.results]
        text = _conf.render(state.results, pending, provenance, ref_route)
        _conf.write(args.out, text)
        if args.json:
            report = {
                "provenance": provenance,
                "versions": versions,
                "reference_route": ref_route,
                "results": state.results,
                "pending": pending,
            }
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")

    flush()
    record_budget = min(args.record_budget, max(0.0, args.time_budget / 4))
    calls = _record.record(testable, args.samples_per_op, record_budget, not args.no_opinfo)
    order = [op for op in calls if op in testable] + [op for op in testable if op not in calls]
    print(
        f"verify_routes: {len(testable)} operators to verify against {ref_route} "
        f"({len(calls)} with recorded calls), {len(state.results)} decided already",
        flush=True,
    )
    status = 0
    for op in order:
        left = args.time_budget - (time.monotonic() - started)
        if left <= 1:
            print("verify_routes: time budget spent; rerun with --resume", flush=True)
            break
        state.start(op)
        _alarm(min(args.op_timeout, left))
        try:
            result = _verify_one(op, calls.get(op, []), ref_route, args)
        except OpTimeout:
            result = {
                "decision": ref_route,
                "category": "timeout",
                "detail": f"not done in {min(args.op_timeout, left):.0f} s",
            }
        except Exception as exc:
            first = str(exc).splitlines()[0][:300] if str(exc) else ""
            result = {
                "decision": ref_route,
                "category": "error",
                "detail": f"{type(exc).__name__}: {first}",
            }
            if _is_device_fault(exc):
                result["category"] = "crashed"
                status = EXIT_DEVICE_FAULT
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        state.add({"op": op, **result})
        print(f"  {_conf.short(op)}: {result['category']}: {result['detail']}", flush=True)
        flush()
        if status == EXIT_DEVICE_FAULT:
            print("verify_routes: the device faulted; rerun with --resume", flush=True)
            break
    flush()
    routed = sum(1 for r in state.results.values() if r["decision"] == "flagos_python")
    print(f"verify_routes: wrote {args.out} ({routed} operators routed to flagos_python)")
    return status


if __name__ == "__main__":
    sys.exit(main())
