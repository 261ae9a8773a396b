"""Host overhead of the flagos_python route, and flagos-with-FlagGems against native cuda.

    python benchmarks/flaggems_overhead.py [--reps 30] [--calls 50] [--ops add,relu,...]

Part 1, route overhead: per operator, host time per call of the flagos_python route (a torch
call on flagos tensors routed to FlagGems) minus that of calling the same FlagGems callable
directly on CUDA tensors. Host time: a batch of calls timed without synchronising inside it
(small tensors, so the GPU queue never fills), synchronising between batches. Target: at
most 5 us.

Part 2, against native cuda: per operator, wall time per call (synchronised batches) of
flagos with FlagGems against torch's CUDA kernel on CUDA tensors, and the ratio.

Part 3, the route's own cost: the same operators routed to a stand-in kernel that returns its
first argument, against calling that stand-in directly. FlagGems' host time varies by tens of
microseconds from batch to batch, which hides a few microseconds of route cost in part 1; the
stand-in takes nanoseconds, so part 3 measures what the route adds (dispatch, aliases, the GIL,
Python objects for the arguments, re-labelling the result) with little noise. What the route
adds does not depend on the kernel it calls.

Part 4, the reference torch itself offers: the same FlagGems callable registered as a
torch.library operator with a CUDA kernel and called on CUDA tensors (how a user puts a Python
kernel behind the dispatcher without torch_fl), against the direct call and against the
flagos_python route; with FlagGems and with the stand-in. Part 1's extra minus part 3's route
cost is the part of the extra that comes with FlagGems; part 4 shows whether torch's own
mechanism pays it too.

Every part interleaves its variants batch by batch in one process and reports medians (paired
differences with 95% bootstrap intervals). GPU only: prints why and exits 0 on a machine without
CUDA or FlagGems.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable

import torch
from _stats import median_interval  # this script's folder is on sys.path


def cases(device: str) -> dict[str, tuple[str, Callable[[], tuple], Callable]]:
    """name -> (aten overload, inputs on `device`, torch call)."""
    g = torch.Generator().manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(device)

    a, b = r(64, 64), r(64, 64)
    big = r(1024, 1024)
    return {
        "add": ("add.Tensor", lambda: (a, b), torch.add),
        "mul": ("mul.Tensor", lambda: (a, b), torch.mul),
        "relu": ("relu", lambda: (a,), torch.relu),
        "mm": ("mm", lambda: (a, b), torch.mm),
        # As users call it (torch.ops.aten._softmax would add its own Python cost to the route).
        "softmax": ("_softmax", lambda: (a, -1, False), lambda x, dim, _: torch.softmax(x, dim)),
        "sum_dim": ("sum.dim_IntList", lambda: (a, [1]), torch.sum),
        "add_1M": ("add.Tensor", lambda: (big, big), torch.add),
        "mm_1k": ("mm", lambda: (big, big), torch.mm),
    }


def batch(fn: Callable, args: tuple, calls: int, sync: bool) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    if sync:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / calls * 1e6


def interleaved(variants: dict[str, tuple[Callable, tuple]], reps: int, calls: int, sync: bool):
    for fn, args in variants.values():  # warm-up: compile, tune
        for _ in range(3):
            fn(*args)
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            fn, args = variants[name]
            times[name].append(batch(fn, args, calls, sync))
    return times


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in times.items()}


def differences(times: dict[str, list[float]], a: str, b: str) -> list[float]:
    """a - b per round, the two measured side by side."""
    return [x - y for x, y in zip(times[a], times[b], strict=True)]


def paired_difference(times: dict[str, list[float]], a: str, b: str) -> float:
    """Median over rounds of a - b measured side by side: steadier than the difference of two
    medians when both vary a lot (FlagGems' own launch path does)."""
    return statistics.median(differences(times, a, b))


def paired_interval(times: dict[str, list[float]], a: str, b: str) -> tuple[float, float]:
    """95% bootstrap interval of paired_difference: FlagGems' host time moves by several
    microseconds from batch to batch, as much as the target, so a median alone says little."""
    return median_interval(differences(times, a, b))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--ops", default="")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("flaggems_overhead: skipped, no CUDA device")
        return 0
    import torch_fl
    from torch_fl import flaggems, routing

    if torch_fl.build_config.ACCELERATOR != "cuda":
        print("flaggems_overhead: skipped, torch_fl is not a cuda build")
        return 0
    try:
        gems = flaggems.load()
    except Exception as exc:
        print(f"flaggems_overhead: skipped, FlagGems is not importable: {exc}")
        return 0
    print(
        f"torch {torch.__version__}, flag-gems {gems.__version__} ({gems.vendor_name}), "
        f"{torch.cuda.get_device_name(0)}; medians of {args.reps} batches of {args.calls} calls "
        "(extra: median of the paired route - direct differences)"
    )
    native, flagos = cases("cuda"), cases("flagos")
    wanted = [k for k in native if not args.ops or k in args.ops.split(",")]
    print(f"{'op':<10} {'direct us':>10} {'route us':>10} {'extra us':>9} {'95% interval':>15}   "
          f"{'cuda us':>9} {'flagos+FG us':>12} {'ratio':>6}")  # fmt: skip
    extras, ratios = [], []
    for name in wanted:
        op, make_native, torch_fn = native[name]
        _, make_flagos, _ = flagos[name]
        canonical = routing._canonical(op)
        try:
            direct_fn = flaggems.resolve(canonical)
        except Exception as exc:
            print(f"{name:<10} skipped: {exc}")
            continue
        flaggems.install([canonical])
        try:
            with routing.route(canonical, "flagos_python"):
                host_times = interleaved(
                    {
                        "direct": (direct_fn, make_native()),
                        "route": (torch_fn, make_flagos()),
                    },
                    args.reps,
                    args.calls,
                    sync=False,
                )
                wall = medians(
                    interleaved(
                        {"cuda": (torch_fn, make_native()), "flagos": (torch_fn, make_flagos())},
                        args.reps,
                        args.calls,
                        sync=True,
                    )
                )
        except Exception as exc:
            print(f"{name:<10} failed: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        host = medians(host_times)
        extra = paired_difference(host_times, "route", "direct")
        lo, hi = paired_interval(host_times, "route", "direct")
        ratio = wall["flagos"] / wall["cuda"]
        extras.append(extra)
        ratios.append(ratio)
        print(
            f"{name:<10} {host['direct']:>10.2f} {host['route']:>10.2f} {extra:>9.2f} "
            f"{f'[{lo:.2f}, {hi:.2f}]':>15}   "
            f"{wall['cuda']:>9.2f} {wall['flagos']:>12.2f} {ratio:>6.2f}"
        )
    if extras:
        print(
            f"route overhead: median {statistics.median(extras):.2f} us per call "
            f"(target <= 5 us); flagos+FlagGems / cuda: geometric mean "
            f"{statistics.geometric_mean(ratios):.2f}"
        )
    route_mechanism(native, flagos, wanted, args.reps, args.calls)
    custom_op_reference(native, flagos, wanted, args.reps, args.calls)
    return 0


def first_argument(*args: object, **kwargs: object) -> object:
    """The stand-in kernel: as cheap as a Python kernel gets."""
    return args[0]


def timed_with_kernel(
    canonical: str, kernel: Callable, variants: dict, reps: int, calls: int
) -> dict[str, list[float]]:
    """Host times of `variants` (sync=False) while `kernel` serves `canonical` on the
    flagos_python route; the previous kernel is put back afterwards."""
    from torch_fl import routing

    previous = routing._C._routing_python_kernel(canonical)
    routing.register_python_kernel(canonical, kernel)
    try:
        with routing.route(canonical, "flagos_python"):
            return interleaved(variants, reps, calls, sync=False)
    finally:
        routing.register_python_kernel(canonical, previous)


def route_mechanism(native: dict, flagos: dict, wanted: list[str], reps: int, calls: int) -> None:
    from torch_fl import routing

    print(
        f"{'op':<10} {'stand-in direct us':>18} {'stand-in routed us':>18} {'route us':>9} "
        f"{'95% interval':>15}"
    )
    costs = []
    for name in wanted:
        op, make_native, torch_fn = native[name]
        _, make_flagos, _ = flagos[name]
        canonical = routing._canonical(op)
        times = timed_with_kernel(
            canonical,
            first_argument,
            {"direct": (first_argument, make_native()), "route": (torch_fn, make_flagos())},
            reps,
            calls,
        )
        host = medians(times)
        cost = paired_difference(times, "route", "direct")
        lo, hi = paired_interval(times, "route", "direct")
        costs.append(cost)
        print(
            f"{name:<10} {host['direct']:>18.2f} {host['route']:>18.2f} {cost:>9.2f} "
            f"{f'[{lo:.2f}, {hi:.2f}]':>15}"
        )
    if costs:
        print(f"route cost: median {statistics.median(costs):.2f} us per call (target <= 5 us)")


# Schemas for part 4: the operators whose FlagGems callable takes the tensors positionally.
CUSTOM_OP_SCHEMAS = {
    "add": "(Tensor a, Tensor b) -> Tensor",
    "mul": "(Tensor a, Tensor b) -> Tensor",
    "relu": "(Tensor a) -> Tensor",
}


def custom_op_reference(
    native: dict, flagos: dict, wanted: list[str], reps: int, calls: int
) -> None:
    from torch_fl import flaggems, routing

    names = [n for n in wanted if n in CUSTOM_OP_SCHEMAS]
    if not names:
        return
    lib = torch.library.Library("flaggems_overhead", "FRAGMENT")
    print(f"{'op':<10} {'kernel':<9} {'custom op - direct us':>22} {'route - direct us':>18} "
          f"{'route - custom op us':>21}")  # fmt: skip
    for name in names:
        op, make_native, torch_fn = native[name]
        _, make_flagos, _ = flagos[name]
        canonical = routing._canonical(op)
        kernels = (
            ("FlagGems", "gems", flaggems.resolve(canonical)),
            ("stand-in", "stand_in", first_argument),
        )
        for kernel, suffix, fn in kernels:
            # The callable itself is the custom op's kernel, as it is the route's: no wrapper
            # frame on either side.
            lib.define(f"{name}_{suffix}{CUSTOM_OP_SCHEMAS[name]}")
            lib.impl(f"{name}_{suffix}", fn, "CUDA")
            custom = getattr(torch.ops.flaggems_overhead, f"{name}_{suffix}")
            times = timed_with_kernel(
                canonical,
                fn,
                {
                    "direct": (fn, make_native()),
                    "custom": (custom, make_native()),
                    "route": (torch_fn, make_flagos()),
                },
                reps,
                calls,
            )
            cells = []
            for a, b in (("custom", "direct"), ("route", "direct"), ("route", "custom")):
                lo, hi = paired_interval(times, a, b)
                cells.append(f"{paired_difference(times, a, b):.2f} [{lo:.2f}, {hi:.2f}]")
            print(f"{name:<10} {kernel:<9} {cells[0]:>22} {cells[1]:>18} {cells[2]:>21}")


if __name__ == "__main__":
    sys.exit(main())
