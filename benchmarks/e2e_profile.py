"""Where the end-to-end gap goes: the GPT-2 training step of `transformer_e2e.py`, split by
phase and by operator, flagos against the native device.

Each device runs in its own child process (a native CUDA backward cannot share a process with
a PrivateUse1 backend, pytorch/pytorch#161129). A child times the phases of a training step
(zero_grad, forward, backward, optimizer step; synchronized after each, medians), records each
phase's peak memory above the memory held before the step, then profiles a few steps with
torch.profiler (host activity only) and reports per-operator call counts and host time
(inclusive: an operator's time includes the router's and the kernel's under it).
The parent prints phase ratios and the operators whose host time differs most. The profiler
slows small operators, so use its table to find where time goes, and `transformer_e2e.py`
for the figures themselves.

    python benchmarks/e2e_profile.py [--steps 10] [--profile-steps 3] [--top 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from transformer_e2e import build, device_module, run_child  # noqa: E402

PHASES = ("zero_grad", "forward", "backward", "step")


def _subtrees(events: Any, names: list[str], per_name: int = 2) -> list[str]:
    """The first calls of the named operators with what ran under them (host µs)."""
    lines: list[str] = []

    def walk(event: Any, depth: int) -> None:
        lines.append(f"{'  ' * depth}{event.name} {event.cpu_time_total:.1f}")
        for child in event.cpu_children:
            walk(child, depth + 1)

    for name in names:
        roots = [e for e in events if e.name == name][:per_name]
        for root in roots:
            walk(root, 1)
    return lines


def _memory_at_peak(step: Any) -> list[str]:
    """One training step under the CUDA allocator's history (flagos memory is CUDA memory on
    the cuda accelerator): the live blocks at the step's peak, grouped by where in Python
    they were allocated."""
    import torch

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=200000, stacks="python")
    step()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    live: dict[int, tuple[int, str]] = {}
    current = peak = 0
    peak_live: dict[int, tuple[int, str]] = {}
    for event in snapshot["device_traces"][0]:
        if event["action"] == "alloc":
            frames = [f for f in event.get("frames", []) if f["filename"].endswith(".py")]
            where = " < ".join(
                f"{Path(f['filename']).name}:{f['line']}:{f['name']}" for f in frames[:3]
            )
            live[event["addr"]] = (event["size"], where)
            current += event["size"]
            if current > peak:
                peak, peak_live = current, dict(live)
        elif event["action"] == "free_completed" and event["addr"] in live:
            current -= live.pop(event["addr"])[0]
    groups: dict[str, int] = {}
    for size, where in peak_live.values():
        groups[where] = groups.get(where, 0) + size
    top = sorted(groups.items(), key=lambda kv: -kv[1])[:12]
    head = (
        f"allocated before the step {before / 2**20:.1f} MiB; peak of the step's own "
        f"allocations {peak / 2**20:.1f} MiB, live then:"
    )
    return [head, *_held_after_step()] + [
        f"  {size / 2**20:8.2f} MiB  {where}" for where, size in top
    ]


def _held_after_step() -> list[str]:
    """What the memory held between steps is: tensors Python can reach (by storage), cuBLAS
    workspaces (freed by clearing them), and the rest (held by C++)."""
    import gc

    import torch

    gc.collect()
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated()
    storages: dict[int, int] = {}
    big: list[str] = []
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.device.type != "cpu" and obj.is_floating_point():
            storage = obj.untyped_storage()
            if storage.data_ptr() not in storages:
                storages[storage.data_ptr()] = storage.nbytes()
                if storage.nbytes() >= 8 * 2**20:
                    big.append(f"{tuple(obj.shape)} {obj.dtype} requires_grad={obj.requires_grad}")
    reachable = sum(storages.values())
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    after_clear = torch.cuda.memory_allocated()
    return [
        f"  held between steps {held / 2**20:.1f} MiB: reachable from Python "
        f"{reachable / 2**20:.1f} MiB, cuBLAS workspaces {(held - after_clear) / 2**20:.1f} "
        f"MiB, other {(after_clear - reachable) / 2**20:.1f} MiB",
        *(f"    large reachable tensor: {line}" for line in big[:12]),
    ]


def _child(
    device: str, steps: int, profile_steps: int, size: str, tree: list[str]
) -> dict[str, Any]:
    import torch

    model, opt, batch, _config, sync = build(device, size)
    module = device_module(device)
    has_stats = hasattr(module, "max_memory_allocated")

    def phases() -> dict[str, float]:
        seconds: dict[str, float] = {}
        peaks: dict[str, float] = {}
        loss = None

        def run(name: str, fn: Any) -> None:
            nonlocal loss
            base = module.memory_allocated() if has_stats else 0
            if has_stats:
                module.reset_peak_memory_stats()
            start = time.perf_counter()
            out = fn()
            sync()
            seconds[name] = time.perf_counter() - start
            peaks[name] = float(module.max_memory_allocated() - base) if has_stats else 0.0
            if name == "forward":
                loss = out

        run("zero_grad", lambda: opt.zero_grad(set_to_none=True))
        run("forward", lambda: model(batch, labels=batch).loss)
        run("backward", lambda: loss.backward())
        run("step", opt.step)
        return {
            **{f"{k}_s": v for k, v in seconds.items()},
            **{f"{k}_peak": v for k, v in peaks.items()},
        }

    for _ in range(3):
        phases()
    samples = [phases() for _ in range(steps)]
    result: dict[str, Any] = {k: statistics.median(s[k] for s in samples) for k in samples[0]}

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(profile_steps):
            phases()
    ops = {}
    for event in prof.key_averages():
        ops[event.key] = (event.count / profile_steps, event.cpu_time_total / profile_steps)
    result["ops"] = ops
    result["tree"] = _subtrees(prof.events(), tree)
    if torch.cuda.is_available():
        result["memory"] = _memory_at_peak(phases)
    return result


def _run_child(device: str, args: argparse.Namespace) -> dict[str, Any]:
    options = ["--steps", str(args.steps), "--profile-steps", str(args.profile_steps)]
    return run_child(__file__, device, [*options, "--size", args.size, "--tree", args.tree])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--size", choices=("small", "medium"), default="small")
    parser.add_argument("--native", default="cuda")
    parser.add_argument(
        "--tree", default="aten::add,aten::arange", help="operators to show with their subtree"
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        tree = [name for name in args.tree.split(",") if name]
        print(json.dumps(_child(args.child, args.steps, args.profile_steps, args.size, tree)))
        return
    flagos, native = _run_child("flagos", args), _run_child(args.native, args)
    print(f"GPT-2-style {args.size} training step, flagos against {args.native}, medians")
    print(f"{'phase':<10}{'flagos ms':>11}{'native ms':>11}{'ratio':>8}{'peak MB f/n':>18}")
    for phase in PHASES:
        f, n = flagos[f"{phase}_s"] * 1e3, native[f"{phase}_s"] * 1e3
        fp, np_ = flagos[f"{phase}_peak"] / 2**20, native[f"{phase}_peak"] / 2**20
        print(f"{phase:<10}{f:>11.3f}{n:>11.3f}{f / n:>8.3f}{fp:>10.1f} /{np_:>6.1f}")
    names = set(flagos["ops"]) | set(native["ops"])
    rows = []
    for name in names:
        fc, ft = flagos["ops"].get(name, (0.0, 0.0))
        nc, nt = native["ops"].get(name, (0.0, 0.0))
        rows.append((ft - nt, name, fc, ft, nc, nt))
    rows.sort(reverse=True)
    print("\nhost time per step and operator, inclusive (nested operators count in each parent)")
    print(f"{'operator':<48}{'calls f':>9}{'calls n':>9}{'µs f':>11}{'µs n':>11}{'extra µs':>10}")
    for extra, name, fc, ft, nc, nt in rows[: args.top]:
        print(f"{name[:47]:<48}{fc:>9.0f}{nc:>9.0f}{ft:>11.0f}{nt:>11.0f}{extra:>10.0f}")
    for label, result in (("flagos", flagos), (args.native, native)):
        print(f"\n{label}: first calls of {args.tree} (inclusive host µs, profiler on)")
        print("\n".join(result["tree"]))
        if "memory" in result:
            print(f"{label}: " + "\n".join(result["memory"]))


if __name__ == "__main__":
    main()
