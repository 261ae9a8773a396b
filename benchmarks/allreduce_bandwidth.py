"""all_reduce bandwidth through the `flagos` backend against the native backend directly.

    python benchmarks/allreduce_bandwidth.py                 # world size 1, one process
    torchrun --nproc-per-node 2 benchmarks/allreduce_bandwidth.py   # several ranks (later issue)

Both run in one process per rank, interleaved: for every message size each round times a batch
of all_reduce calls through the flagos group on flagos tensors and a batch through a native
group on native tensors (NCCL on cuda tensors on a GPU build; gloo on plain cpu tensors on the
cpu accelerator), alternating which goes first. Per-op time is the median over rounds; algbw is
bytes / time, busbw is algbw x 2(n-1)/n (the nccl-tests convention, 0 at world size 1, so the
ratio is taken on time: native time / flagos time, 1.0 = no overhead). The target is a ratio of
at least 0.98 for 64 MB messages.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone

import torch
import torch.distributed as dist
from _stats import median_interval  # this script's folder is on sys.path

import torch_fl

MB = 1 << 20


def _sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        part = part.strip().upper()
        scale = {"K": 1 << 10, "M": MB, "G": 1 << 30}.get(part[-1], 1)
        out.append(int(float(part.rstrip("KMG")) * scale))
    return out


def _time_batch(tensor, group, iters: int, sync) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(tensor, group=group)
    sync()
    return (time.perf_counter() - start) / iters


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1M,4M,16M,64M,256M,1G")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument(
        "--budget-bytes",
        type=float,
        default=2e9,
        help="bytes reduced per batch (sets iterations per size; world size 1: 200 calls)",
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", str(rank)))
    accel = torch_fl.build_config.ACCELERATOR
    cuda = torch_fl._C._native_device_type() == "cuda"
    flagos_dev = torch.device("flagos", local)
    native_dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    torch.flagos.set_device(flagos_dev)
    if cuda:
        torch.cuda.set_device(native_dev)

    tmp = None
    if world == 1 and "MASTER_ADDR" not in os.environ:
        tmp = tempfile.mkdtemp(prefix="flagos_bench_")
        init = {"init_method": f"file://{tmp}/store", "rank": 0, "world_size": 1}
    else:
        init = {"init_method": "env://"}
    # No device_id: new_group() would look for a flagos backend in the native group.
    dist.init_process_group("flagos", **init)
    native_backend = "nccl" if cuda else "gloo"
    native_group = dist.new_group(backend=native_backend)
    info = torch_fl.comm.tier_info()

    def sync() -> None:
        torch.flagos.synchronize(flagos_dev)
        if cuda:
            torch.cuda.synchronize(native_dev)

    factor = 2 * (world - 1) / world
    rows = []
    for nbytes in _sizes(args.sizes):
        numel = nbytes // 4
        x_flagos = torch.ones(numel, device=flagos_dev)
        x_native = torch.ones(numel, device=native_dev)
        # At world size 1 no data moves (each call is host time only): every size gets the
        # longest batch, where a byte budget would leave 64 MB a batch of 29 calls.
        iters = 200 if world == 1 else int(max(3, min(200, args.budget_bytes // nbytes)))
        for _ in range(3):  # warm-up: communicators, caches
            _time_batch(x_flagos, None, 1, sync)
            _time_batch(x_native, native_group, 1, sync)
        t_flagos, t_native = [], []
        for r in range(args.rounds):
            order = [("flagos", x_flagos, None), ("native", x_native, native_group)]
            if r % 2:
                order.reverse()
            for kind, x, group in order:
                dt = _time_batch(x, group, iters, sync)
                (t_flagos if kind == "flagos" else t_native).append(dt)
        tf, tn = statistics.median(t_flagos), statistics.median(t_native)
        # Each round times both sides back to back: the per-round ratios share that round's
        # host speed, and their median's interval says whether the target is met.
        paired = [n / f for n, f in zip(t_native, t_flagos, strict=True)]
        low, high = median_interval(paired)
        rows.append(
            {
                "bytes": nbytes,
                "iters": iters,
                "flagos_us": tf * 1e6,
                "native_us": tn * 1e6,
                "flagos_algbw_GBps": nbytes / tf / 1e9,
                "native_algbw_GBps": nbytes / tn / 1e9,
                "flagos_busbw_GBps": nbytes / tf / 1e9 * factor,
                "native_busbw_GBps": nbytes / tn / 1e9 * factor,
                "ratio": tn / tf,
                "paired_ratio": statistics.median(paired),
                "paired_ratio_95": [low, high],
            }
        )
        del x_flagos, x_native

    if rank == 0:
        name = torch.cuda.get_device_name(local) if cuda else "cpu"
        stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
        print(f"# all_reduce SUM float32, world size {world}, {stamp} UTC")
        print(f"# torch {torch.__version__}, torch_fl accelerator {accel}, device {name}")
        print(
            f"# flagos group: tier={info.tier} path={info.path} profile={info.profile}; "
            f"native group: {native_backend} on {native_dev.type} tensors"
        )
        print(
            f"# {args.rounds} interleaved rounds, median per-op time; ratio = native/flagos time; "
            "paired: median of the per-round ratios and its 95% bootstrap interval"
        )
        print(
            f"{'size':>8} {'iters':>5} {'flagos us':>11} {'native us':>11} "
            f"{'flagos algbw':>13} {'native algbw':>13} {'flagos busbw':>13} "
            f"{'native busbw':>13} {'ratio':>6} {'paired':>6} {'95% interval':>15}"
        )
        for row in rows:
            n = row["bytes"]
            size = f"{n >> 30}G" if n >= 1 << 30 else f"{n // MB}M" if n >= MB else f"{n >> 10}K"
            print(
                f"{size:>8} {row['iters']:>5} {row['flagos_us']:>11.1f} {row['native_us']:>11.1f} "
                f"{row['flagos_algbw_GBps']:>13.2f} {row['native_algbw_GBps']:>13.2f} "
                f"{row['flagos_busbw_GBps']:>13.2f} {row['native_busbw_GBps']:>13.2f} "
                f"{row['ratio']:>6.3f} {row['paired_ratio']:>6.3f} "
                f"[{row['paired_ratio_95'][0]:.3f}, {row['paired_ratio_95'][1]:.3f}]"
            )
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(
                    {
                        "world_size": world,
                        "torch": torch.__version__,
                        "accelerator": accel,
                        "tier": info.tier,
                        "path": info.path,
                        "rows": rows,
                    },
                    fh,
                    indent=1,
                )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
