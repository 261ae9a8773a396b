"""torch.compile speedup over eager for a transformer block, flagos against the native device.

The same block (pre-norm attention + MLP, random weights) runs on flagos and on the native
device (cuda on the cuda accelerator, plain CPU tensors on the cpu accelerator), each eager and
compiled with the default Inductor backend, interleaved in one process (the order rotates every
round), forward passes under no_grad. Reported: medians per pass, each device's speedup
(eager / compiled) and the ratio of the speedups flagos/native (target on the H200: >= 0.95).
Forward only: a native CUDA backward cannot run in a process where a PrivateUse1 backend is
registered (pytorch/pytorch#161129).

    python benchmarks/compile_speedup.py [--rounds 10] [--iters 20] [--size small|gpt2]
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch
from _models import Block
from _stats import time_interleaved

import torch_fl

SIZES = {"small": (4, 64, 128, 4), "gpt2": (8, 256, 768, 12)}  # batch, seq, dim, heads


def _sync(device: str) -> None:
    if device.startswith("flagos"):
        torch.flagos.synchronize()
    elif device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--iters", type=int, default=20)
    native_default = "cuda" if torch_fl.build_config.ACCELERATOR == "cuda" else "cpu"
    parser.add_argument("--size", choices=sorted(SIZES), default=None)
    args = parser.parse_args()
    size = args.size or ("gpt2" if native_default == "cuda" else "small")
    batch, seq, dim, heads = SIZES[size]

    torch.manual_seed(0)
    block = Block(dim, heads).eval()
    x = torch.randn(batch, seq, dim)
    runs = {}
    for device in ("flagos", native_default):
        model = copy.deepcopy(block).to(device)
        inp = x.to(device)
        runs[(device, "eager")] = (model, inp)
        runs[(device, "compiled")] = (torch.compile(model), inp)

    with torch.no_grad():
        for key, (fn, inp) in runs.items():  # compile and warm up
            for _ in range(3):
                fn(inp)
            _sync(key[0])
        calls = {key: (lambda fn=fn, inp=inp: fn(inp)) for key, (fn, inp) in runs.items()}
        seconds = time_interleaved(calls, args.rounds, args.iters, lambda key: _sync(key[0]))
    times = {key: [t * 1e3 for t in values] for key, values in seconds.items()}

    med = {key: statistics.median(v) for key, v in times.items()}
    print(
        f"torch {torch.__version__}, accelerator {torch_fl.build_config.ACCELERATOR}, block "
        f"{size} (batch {batch}, seq {seq}, dim {dim}, heads {heads}), medians of "
        f"{args.rounds} rounds x {args.iters} passes"
    )
    print(f"{'device':<8} {'eager ms':>10} {'compiled ms':>12} {'speedup':>8}")
    speedups = {}
    for device in ("flagos", native_default):
        eager, compiled = med[(device, "eager")], med[(device, "compiled")]
        speedups[device] = eager / compiled
        print(f"{device:<8} {eager:>10.3f} {compiled:>12.3f} {speedups[device]:>8.3f}")
    ratio = speedups["flagos"] / speedups[native_default]
    print(f"ratio of speedups flagos/{native_default}: {ratio:.3f} (target >= 0.95)")
    print(
        f"compiled flagos / compiled {native_default} time: "
        f"{med[('flagos', 'compiled')] / med[(native_default, 'compiled')]:.3f}"
    )


if __name__ == "__main__":
    main()
