"""Graph replay of flagos work against graph replay of the same work on the native device.

A decode-shaped forward (a stack of transformer blocks at batch 1, a few positions, no_grad) runs
four ways, interleaved in one process with the order rotating every round: eager on flagos,
eager on cuda, a torch.flagos.FlagOSGraph replay, a torch.cuda.CUDAGraph replay. Reported:
medians per forward with 95% intervals, the replay ratio flagos/cuda (a replay launches the
captured kernels without the host path of any operator, so this is the cost flagos leaves in a
graphed decode), the eager ratio, and each device's speedup from graphs.

On the cpu accelerator there is no CUDA graph to compare with: the script says so and exits 0.

    python benchmarks/graph_replay.py [--rounds 30] [--iters 20] [--layers 4] [--tokens 4]
"""

from __future__ import annotations

import argparse
import copy
import statistics
from collections.abc import Callable

import torch
from _models import Block  # this script's folder is on sys.path
from _stats import median_interval, time_interleaved

import torch_fl


def _sync(device: str) -> None:
    (torch.flagos if device == "flagos" else torch.cuda).synchronize()


def _graphed(device: str, fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
    """Captures `fn` on `device` (after a warm-up on a side stream); returns the replay."""
    module = torch.flagos if device == "flagos" else torch.cuda
    with module.stream(module.Stream()):
        fn()
    _sync(device)
    if device == "flagos":
        g = torch.flagos.FlagOSGraph()
        with torch.flagos.graph(g):
            fn()
    else:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
    return g.replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--dim", type=int, default=768)
    args = parser.parse_args()
    if torch_fl._C._native_device_type() == "cpu":
        print("graph replay skipped: it compares flagos graphs with CUDA graphs (cuda accelerator)")
        return

    torch.manual_seed(0)
    stack = torch.nn.Sequential(*(Block(args.dim, 12) for _ in range(args.layers))).eval()
    x = torch.randn(1, args.tokens, args.dim)
    runs: dict[tuple[str, str], Callable[[], object]] = {}
    with torch.no_grad():
        for device in ("flagos", "cuda"):
            model = copy.deepcopy(stack).to(device)
            inp = x.to(device)
            runs[(device, "eager")] = lambda m=model, i=inp: m(i)
            runs[(device, "graph")] = _graphed(device, lambda m=model, i=inp: m(i))

        for fn in runs.values():
            fn()
        seconds = time_interleaved(runs, args.rounds, args.iters, lambda key: _sync(key[0]))
    times = {key: [t * 1e6 for t in values] for key, values in seconds.items()}

    med = {key: statistics.median(v) for key, v in times.items()}
    print(
        f"torch {torch.__version__}, {args.layers} blocks, dim {args.dim}, batch 1, "
        f"{args.tokens} positions; medians of {args.rounds} rounds x {args.iters} forwards (us)"
    )
    for key, values in times.items():
        low, high = median_interval(values)
        print(f"{key[0]:<7} {key[1]:<6} {med[key]:>10.1f}  [{low:.1f}, {high:.1f}]")
    paired = [
        f / c for f, c in zip(times[("flagos", "graph")], times[("cuda", "graph")], strict=True)
    ]
    low, high = median_interval(paired)
    print(
        f"graph replay ratio flagos/cuda: {statistics.median(paired):.3f} [{low:.3f}, {high:.3f}]"
    )
    print(f"eager ratio flagos/cuda: {med[('flagos', 'eager')] / med[('cuda', 'eager')]:.3f}")
    for device in ("flagos", "cuda"):
        speedup = med[(device, "eager")] / med[(device, "graph")]
        print(f"{device} speedup from graphs: {speedup:.2f}x")


if __name__ == "__main__":
    main()
