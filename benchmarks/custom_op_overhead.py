"""Host time per call of a torch.library custom operator on flagos against the same operator on
the native device (CPU on the cpu accelerator, CUDA on a GPU build).

    python benchmarks/custom_op_overhead.py [--rounds 40] [--calls 200] [--numel 4096]

One operator, `fl_bench::scaled_silu`, registered with `torch.library.custom_op` for both
device types. Its flagos kernel runs the native kernel on `torch_fl.native_view`s of the flagos
tensors (docs/custom-ops.md); its native kernel runs the same on the tensors themselves. The
difference is what the flagos recipe costs per call: two views and a flagos allocation of the
output instead of a native one. For context, the plain eager `F.silu(x) * scale` on each device.
Batches of calls are interleaved round by round in one process (the order rotating), synchronised
around each batch; medians of the rounds, with the ratio flagos / native and its 95% bootstrap
interval.
"""

from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F
from _stats import median_interval, time_interleaved  # this script's folder is on sys.path
from torch import Tensor

import torch_fl

NATIVE = torch_fl._C._native_device_type()


@torch.library.custom_op("fl_bench::scaled_silu", mutates_args=(), device_types=("flagos", NATIVE))
def scaled_silu(x: Tensor, scale: float) -> Tensor:
    out = torch.empty_like(x)
    torch.mul(F.silu(x), scale, out=out)
    return out


@scaled_silu.register_kernel("flagos")
def _(x: Tensor, scale: float) -> Tensor:
    out = torch.empty_like(x)
    native_out = torch_fl.native_view(out)
    torch.mul(F.silu(torch_fl.native_view(x)), scale, out=native_out)
    return out


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=40)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--numel", type=int, default=4096)
    args = p.parse_args()

    base = torch.randn(args.numel)
    x = {dev: base.to(dev) for dev in ("flagos", NATIVE)}
    runs = {
        ("custom_op", "flagos"): lambda: scaled_silu(x["flagos"], 2.0),
        ("custom_op", NATIVE): lambda: scaled_silu(x[NATIVE], 2.0),
        ("eager", "flagos"): lambda: F.silu(x["flagos"]) * 2.0,
        ("eager", NATIVE): lambda: F.silu(x[NATIVE]) * 2.0,
    }
    torch.testing.assert_close(
        runs[("custom_op", "flagos")]().cpu(), runs[("custom_op", NATIVE)]().cpu()
    )

    def sync(key: tuple[str, str]) -> None:
        (
            torch.flagos if key[1] == "flagos" else torch.cuda if NATIVE == "cuda" else torch.cpu
        ).synchronize()

    for fn in runs.values():  # warm up
        for _ in range(20):
            fn()
    times = time_interleaved(runs, args.rounds, args.calls, sync)
    print(
        f"torch {torch.__version__}, accelerator {torch_fl.build_config.ACCELERATOR}, "
        f"numel {args.numel}, {args.rounds} rounds of {args.calls} calls"
    )
    for kind in ("custom_op", "eager"):
        flagos, native = times[(kind, "flagos")], times[(kind, NATIVE)]
        ratios = [f / n for f, n in zip(flagos, native, strict=True)]
        lo, hi = median_interval(ratios)
        print(
            f"{kind:10s} flagos {statistics.median(flagos) * 1e6:8.2f} us  {NATIVE} "
            f"{statistics.median(native) * 1e6:8.2f} us  ratio {statistics.median(ratios):.3f} "
            f"[{lo:.3f}, {hi:.3f}]"
        )


if __name__ == "__main__":
    main()
