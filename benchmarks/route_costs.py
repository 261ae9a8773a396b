"""Where the host time of a routed call goes, timed in C++ (no Python in the loop).

    python benchmarks/route_costs.py [--iterations 2000] [--rounds 9] [--shape 64,64]

Times each part of the zero-copy route on a flagos float32 tensor through
torch_fl._C._route_part_costs: making a native alias (and freeing it, or handing it back to
the thread's pool as a routed call does), re-labelling a native
result, reading the current device, the profiler check, and a whole `add` on flagos tensors
against the same `add` on native tensors, all called from C++. Parts run interleaved, round
after round; the table gives the median round in nanoseconds per call. The last lines
compare the sum of the parts an `add` uses with its measured extra.
"""

from __future__ import annotations

import argparse
import platform

import torch

import torch_fl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--shape", default="64,64")
    args = parser.parse_args()
    torch.set_num_threads(1)
    shape = [int(s) for s in args.shape.split(",")]
    x = torch.randn(*shape).to("flagos")
    costs = torch_fl._C._route_part_costs(x, args.iterations, args.rounds)
    print(
        f"torch {torch.__version__}, torch_fl accelerator {torch_fl.build_config.ACCELERATOR}, "
        f"python {platform.python_version()}; tensor {tuple(shape)} float32; "
        f"{args.rounds} rounds x {args.iterations} calls, median round"
    )
    width = max(len(k) for k in costs)
    for name, ns in costs.items():
        print(f"{name:{width}s} {ns:9.1f} ns")
    extra = costs["add, flagos tensors"] - costs["add, native tensors"]
    relabel = costs["native empty + relabel in place"] - costs["native empty (make + free)"]
    parts = (
        2 * costs["native alias (make + release)"]
        + relabel
        + costs["current device"]
        + costs["profiler callback check"]
    )
    print(f"add: flagos extra per call {extra:.1f} ns ({extra / costs['add, native tensors']:.1%})")
    print(
        f"  of which two aliases, one re-labelled result, the device read and the profiler "
        f"check: {parts:.1f} ns; the rest (fast-kernel wiring, the extra dispatch hop): "
        f"{extra - parts:.1f} ns"
    )


if __name__ == "__main__":
    main()
