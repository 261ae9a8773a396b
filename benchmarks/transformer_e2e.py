"""End-to-end: a small GPT-2-style model from `transformers` (random weights, no download) on
flagos against the native device: training step time, greedy-decode time and peak memory.

Each measurement runs in a fresh child process, alternating flagos and native for several
rounds; medians are reported as flagos/native ratios. Training cannot share one process: a
CUDA backward fails where a PrivateUse1 backend is registered (pytorch/pytorch#161129), so the
native children run with TORCH_DEVICE_BACKEND_AUTOLOAD=0 and never load torch_fl. Decoding
and an AdamW step (gradients set, not computed) run no backward, so they are also measured in
one process, flagos and native calls interleaved: processes on the GPU machine differ in host
speed by more than the target, and these lines are free of that. Their paired figure is the
median of the ratios of neighbouring calls (one flagos, one native) with its 95% bootstrap
interval: host speed drifts within a process too, and neighbours share the drift.

    python benchmarks/transformer_e2e.py [--rounds 5] [--steps 20] [--native cuda|cpu]
    python benchmarks/transformer_e2e.py --child pair:cuda --pair-reps 40  # one process only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _stats import median_interval


def build(device: str, size: str) -> tuple[Any, Any, Any, Any, Callable[[], None]]:
    """The model, its AdamW optimizer, a token batch, the config and a device sync."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    if device.startswith("flagos"):
        import torch_fl  # noqa: F401
    dims = {"small": (4, 256, 4), "medium": (12, 768, 12)}[size]
    config = GPT2Config(
        vocab_size=8192, n_positions=256, n_layer=dims[0], n_embd=dims[1], n_head=dims[2]
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).to(device)
    module = device_module(device)

    def sync() -> None:
        if module is not None and hasattr(module, "synchronize"):
            module.synchronize()

    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = torch.randint(0, config.vocab_size, (8, 128)).to(device)
    return model, opt, batch, config, sync


def device_module(device: str) -> Any:
    import torch

    return torch.flagos if device.startswith("flagos") else getattr(torch, device, None)


def _decode_times(
    model: Any, prompt: Any, tokens: int, sync: Callable[[], None]
) -> Callable[[], float]:
    """A function timing one greedy decode of `tokens` tokens (seconds)."""
    import torch

    def once() -> float:
        with torch.no_grad():
            start = time.perf_counter()
            model.generate(prompt, max_new_tokens=tokens, do_sample=False, pad_token_id=0)
            sync()
            return time.perf_counter() - start

    return once


def _measure_pair(native: str, reps: int, decode_tokens: int, size: str) -> dict[str, float]:
    """Greedy decode, then one AdamW step (gradients set, no backward), on flagos and on the
    native device in this one process, interleaved."""
    import torch

    decode, steps, syncs = {}, {}, {}
    for device in ("flagos", native):
        model, opt, batch, _, sync = build(device, size)
        model.eval()
        decode[device] = _decode_times(model, batch[:1, :16], decode_tokens, sync)
        decode[device]()  # warm-up
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        steps[device], syncs[device] = opt.step, sync

    def step_time(device: str) -> float:
        start = time.perf_counter()
        steps[device]()
        syncs[device]()
        return time.perf_counter() - start

    times: dict[str, list[float]] = {}
    summary: dict[str, float] = {}
    for what, run in (("decode", lambda d: decode[d]()), ("opt_step", step_time)):
        run("flagos"), run(native)  # warm-up (the first step creates the optimizer state)
        for rep in range(reps):
            for device in ("flagos", native) if rep % 2 == 0 else (native, "flagos"):
                times.setdefault(f"{what}_{device}_s", []).append(run(device))
        paired = [
            f / n
            for f, n in zip(times[f"{what}_flagos_s"], times[f"{what}_{native}_s"], strict=True)
        ]
        summary[f"{what}_paired"] = statistics.median(paired)
        summary[f"{what}_paired_lo"], summary[f"{what}_paired_hi"] = median_interval(paired)
    return {**{k: statistics.median(t) for k, t in times.items()}, **summary}


def _measure(device: str, steps: int, decode_tokens: int, size: str) -> dict[str, float]:
    import torch

    model, opt, batch, config, sync = build(device, size)
    module = device_module(device)

    def train_step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = model(batch, labels=batch).loss
        loss.backward()
        opt.step()

    for _ in range(3):
        train_step()
    sync()
    if module is not None and hasattr(module, "reset_peak_memory_stats"):
        module.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        train_step()
        sync()
        times.append(time.perf_counter() - start)
    peak = module.max_memory_allocated() if hasattr(module, "max_memory_allocated") else 0

    model.eval()
    prompt = batch[:1, :16]
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
        sync()
    decode_once = _decode_times(model, prompt, decode_tokens, sync)
    decode = [decode_once() for _ in range(max(3, steps // 4))]
    return {
        "train_step_s": statistics.median(times),
        "decode_s": statistics.median(decode),
        "peak_bytes": float(peak),
    }


def run_child(script: str, device: str, args: list[str]) -> dict[str, Any]:
    """Runs `script --child device args...` in a fresh process and returns the JSON it prints
    last. Native children never load torch_fl (a CUDA backward cannot run beside a
    PrivateUse1 backend, pytorch/pytorch#161129)."""
    env = dict(os.environ)
    if not device.startswith("flagos"):
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    cmd = [sys.executable, script, "--child", device, *args]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _child(device: str, args: argparse.Namespace) -> dict[str, float]:
    options = ["--steps", str(args.steps), "--decode-tokens", str(args.decode_tokens)]
    options += ["--pair-reps", str(args.pair_reps)]
    return run_child(__file__, device, [*options, "--size", args.size])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--decode-tokens", type=int, default=32)
    parser.add_argument("--size", choices=("small", "medium"), default="small")
    parser.add_argument("--native", default=None, help="cuda or cpu (default: from the build)")
    parser.add_argument(
        "--pair-reps",
        type=int,
        default=0,
        help="calls of each device in the one-process lines (default: --steps, at least 6)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child and args.child.startswith("pair:"):
        native = args.child.split(":", 1)[1]
        reps = args.pair_reps or max(6, args.steps)
        print(json.dumps(_measure_pair(native, reps, args.decode_tokens, args.size)))
        return
    if args.child:
        print(json.dumps(_measure(args.child, args.steps, args.decode_tokens, args.size)))
        return
    native = args.native
    if native is None:
        import importlib.util
        import pathlib

        # Read the build record without importing torch_fl into this parent process.
        record = pathlib.Path(__file__).resolve().parents[1] / "torch_fl" / "_build_config.py"
        spec = importlib.util.spec_from_file_location("record", record)
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        native = "cuda" if mod.ACCELERATOR == "cuda" else "cpu"
    # The one-process lines first: they are the trustworthy ones, and a run cut short by a
    # time limit should still have them.
    pair = _child(f"pair:{native}", args)
    for what in ("decode", "opt_step"):
        f, n = pair[f"{what}_flagos_s"], pair[f"{what}_{native}_s"]
        label = f"{what}_s (1 process, interleaved)"
        paired = pair[f"{what}_paired"], pair[f"{what}_paired_lo"], pair[f"{what}_paired_hi"]
        print(
            f"{label:<16}{f:>14.6g}{n:>14.6g}{f / n:>10.3f}"
            f"  paired {paired[0]:.3f} [{paired[1]:.3f}, {paired[2]:.3f}]",
            flush=True,
        )
    results: dict[str, list[dict[str, float]]] = {"flagos": [], native: []}
    metrics = ("train_step_s", "decode_s", "peak_bytes")
    for i in range(args.rounds):
        for device in ("flagos", native):
            results[device].append(_child(device, args))
        # Per round too, so a run cut short still says something.
        f, n = results["flagos"][-1], results[native][-1]
        ratios = ", ".join(f"{m} {f[m] / n[m]:.3f}" for m in metrics if n[m])
        print(f"round {i + 1}: flagos/{native} {ratios}", flush=True)
    print(f"GPT-2-style {args.size} model, {args.rounds} alternating rounds, medians")
    print(f"{'metric':<16}{'flagos':>14}{native:>14}{'ratio':>10}")
    for metric in metrics:
        f = statistics.median(r[metric] for r in results["flagos"])
        n = statistics.median(r[metric] for r in results[native])
        ratio = f / n if n else float("nan")
        print(f"{metric:<16}{f:>14.6g}{n:>14.6g}{ratio:>10.3f}")


if __name__ == "__main__":
    main()
