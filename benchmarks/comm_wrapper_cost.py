"""Host time the flagos c10d backend adds to a collective call, without a network or peers.

    python benchmarks/comm_wrapper_cost.py [--calls 2000] [--rounds 30] [--numel 16]

Wraps ProcessGroupFlagOS around torch's FakeProcessGroup (a c10d backend that does nothing and
keeps nothing) and times `allreduce([t]).wait()` from Python on a flagos tensor through the
wrapper against the same call on the fake alone with a native tensor. Both sides pay the
pybind11 call, the work object and its wait; the difference is the wrapper's own cost per call:
argument checks, the zero-copy alias, its work object and the hand-back of the alias.
Interleaved, round after round; medians of the rounds in ns per call. On the H200 a world-size-1
NCCL all_reduce costs 13-20 µs of host time, so 0.27 µs of wrapper is 2% of it
(docs/performance.md, "all_reduce through the flagos c10d backend").
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch._C._distributed_c10d import FakeProcessGroup

import torch_fl


def time_calls(backend: object, tensors: list[torch.Tensor], calls: int) -> float:
    opts = torch.distributed.AllreduceOptions()
    start = time.perf_counter_ns()
    for _ in range(calls):
        backend.allreduce(tensors, opts).wait()
    return (time.perf_counter_ns() - start) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--numel", type=int, default=16)
    args = parser.parse_args()

    native = torch_fl._C._native_device_type()
    fake = FakeProcessGroup._create_internal(0, 1)
    tier = "nccl" if native == "cuda" else "gloo"
    wrapped = torch_fl._C._comm_init().ProcessGroupFlagOS(fake, tier, "zero_copy")
    x_flagos = [torch.ones(args.numel, device="flagos")]
    x_native = [torch.ones(args.numel, device=native)]
    for _ in range(3):  # warm-up: the alias pool, caches
        time_calls(wrapped, x_flagos, args.calls)
        time_calls(fake, x_native, args.calls)
    t_wrapped, t_fake = [], []
    for r in range(args.rounds):
        order = [(wrapped, x_flagos, t_wrapped), (fake, x_native, t_fake)]
        for backend, tensors, out in order if r % 2 == 0 else reversed(order):
            out.append(time_calls(backend, tensors, args.calls))
    w, f = statistics.median(t_wrapped), statistics.median(t_fake)
    print(
        f"torch {torch.__version__}, torch_fl accelerator {torch_fl.build_config.ACCELERATOR}; "
        f"{args.rounds} interleaved rounds x {args.calls} calls, medians"
    )
    print(f"FakeProcessGroup alone, {native} tensor        {f:9.0f} ns per call")
    print(f"ProcessGroupFlagOS around it, flagos tensor {w:9.0f} ns per call")
    print(f"wrapper cost                                {w - f:9.0f} ns per call")


if __name__ == "__main__":
    main()
