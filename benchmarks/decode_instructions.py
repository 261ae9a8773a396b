"""Instructions a greedy decode executes on flagos against the native device (callgrind).

    python benchmarks/decode_instructions.py [--tokens 8] [--decodes 2] [--native cpu]
    python benchmarks/decode_instructions.py --workload mlp_step [--steps 10]

Host time per routed call is noisy (processes and leases differ by more than the effect);
instruction counts are not. Each device runs in its own child process under valgrind's
callgrind with instrumentation off until the model is built and warmed up, then on for the
timed decodes only (`callgrind_control -i on`). A third child, without valgrind, counts the
routed calls of the same decodes (torch_fl.routing.stats). Prints the instructions of each side,
flagos's extra per forward and per routed call. Needs valgrind; runs for a few minutes. The model
is transformer_e2e.py's; one intra-op thread, so thread pools do not spin.

`--workload mlp_step` counts dispatch_overhead.py's small-MLP training step instead, as its
`mlp_step_eq` line runs it (autograd multithreading off and SGD(foreach=False) on both sides, so
only the router differs): the router's share of the foundation issue's MLP-step target, free of
the host's timing noise. `mlp_step_default` is the step as a user writes it (the autograd
engine's device thread and torch's foreach optimizer default for flagos; callgrind runs the
threads one at a time and counts them all, so the hand-off's wake-up latency does not show).

With --cache-sim, callgrind also simulates the caches and the script prints first-level
instruction-cache misses: each side's total, flagos's extra per routed call, and how many of the
flagos side's misses fall in torch_fl's own code per routed call (counted by library, read from
callgrind's file: callgrind_annotate would merge same-named inline functions of torch_fl and
libtorch), with torch_fl's own instructions per routed call. A routed call's code runs
cold (the model's other work evicts it between calls), so the cache lines it touches, not its
instruction count, are what it costs; the total is disturbed by Python's allocator by some tens
of misses per routed call from run to run, the torch_fl part is not.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile


def build(device: str):  # noqa: ANN201 - (model, prompt)
    """transformer_e2e.py's small GPT-2 in eval mode and a 32-token prompt."""
    import torch
    from transformer_e2e import build as build_gpt2  # this script's folder is on sys.path

    torch.set_num_threads(1)
    model, _, batch, _, _ = build_gpt2(device, "small")
    return model.eval(), batch[:1, :32]


def decode(model, prompt, tokens: int) -> None:  # noqa: ANN001
    import torch

    with torch.no_grad():
        model.generate(
            prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0
        )


def mlp_step(device: str, default: bool):  # noqa: ANN201 - the step, a callable
    """dispatch_overhead.py's MLP training step; unless `default`, as its mlp_step_eq runs it
    (autograd multithreading off, SGD(foreach=False))."""
    import torch
    from dispatch_overhead import _mlp_step_variant  # this script's folder is on sys.path

    torch.set_num_threads(1)
    return _mlp_step_variant(device, multithreading=default, foreach=None if default else False)


def workload(args: argparse.Namespace, device: str):  # noqa: ANN201 - a callable
    """The measured work: one greedy decode or one training step."""
    if args.workload == "decode":
        model, prompt = build(device)
        return lambda: decode(model, prompt, args.tokens)
    return mlp_step(device, args.workload == "mlp_step_default")


def repeats(args: argparse.Namespace) -> int:
    return args.decodes if args.workload == "decode" else args.steps


def child(args: argparse.Namespace) -> None:
    import torch_fl

    run = workload(args, args.child)
    for _ in range(2 if args.workload == "decode" else 20):
        run()
    if args.count_routes:
        torch_fl.routing.reset_stats()
    else:
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True)
    for _ in range(repeats(args)):
        run()
    if args.count_routes:
        stats = torch_fl.routing.stats()
        print("ROUTED", sum(sum(v.values()) for v in stats.values()))
    else:
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], capture_output=True)


def _child_env() -> dict[str, str]:
    # A fixed hash seed: Python's dict and set work otherwise moves each side's count by some
    # hundred thousand instructions from run to run.
    return dict(os.environ, TRANSFORMERS_VERBOSITY="error", PYTHONHASHSEED="0")


def child_args(args: argparse.Namespace) -> list[str]:
    return [
        "--workload",
        args.workload,
        "--tokens",
        str(args.tokens),
        "--decodes",
        str(args.decodes),
        "--steps",
        str(args.steps),
    ]


def instructions(device: str, args: argparse.Namespace) -> dict[str, int]:
    """Instructions (Ir), and with --cache-sim I1 misses in all and in torch_fl's code."""
    out_file = "/dev/null"
    if args.cache_sim:
        fd, out_file = tempfile.mkstemp(prefix=f"callgrind-{device}-")
        os.close(fd)
    cmd = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--cache-sim={'yes' if args.cache_sim else 'no'}",
        f"--callgrind-out-file={out_file}",
        sys.executable,
        __file__,
        "--child",
        device,
        *child_args(args),
    ]
    out = subprocess.run(cmd, env=_child_env(), capture_output=True, text=True, check=True).stderr
    found = re.search(r"Collected : (\d+)(?: \d+ \d+ (\d+))?", out)
    if not found:
        raise SystemExit(f"no instruction count from callgrind for {device}:\n{out[-2000:]}")
    counts = {"Ir": int(found.group(1))}
    if args.cache_sim:
        counts["I1mr"] = int(found.group(2))
        counts["I1mr_torch_fl"] = _torch_fl_cost(out_file, "I1mr")
        counts["Ir_torch_fl"] = _torch_fl_cost(out_file, "Ir")
        os.unlink(out_file)
    return counts


def _torch_fl_cost(out_file: str, event: str) -> int:
    """The cost of the code in torch_fl's libraries, read from the callgrind file by object.

    callgrind_annotate merges functions of the same name across libraries, so an inline c10
    function that torch_fl and libtorch each carry a copy of (TensorImpl::set_sizes_and_strides,
    intrusive_ptr::reset_not_null_) would count torch's misses as torch_fl's.
    """
    costs = _self_costs(out_file, event)
    return sum(cost for (obj, _), cost in costs.items() if "/torch_fl/" in obj)


def _self_costs(out_file: str, event: str) -> dict[tuple[str, str], int]:
    """Each function's own cost of `event`, keyed by (object file, function name)."""
    names: dict[str, dict[str, str]] = {"ob": {}, "fn": {}}
    obj = fn = ""
    column = 0
    after_calls = False  # the cost line after calls= is the callee's inclusive cost
    costs: dict[tuple[str, str], int] = {}
    with open(out_file) as lines:
        for line in lines:
            if line[0].isdigit() or line[0] in "+-*":
                if after_calls:
                    after_calls = False
                    continue
                fields = line.split()
                if len(fields) > column and fields[column] != "0":
                    costs[(obj, fn)] = costs.get((obj, fn), 0) + int(fields[column])
            elif line.startswith("events:"):
                column = 1 + line.split()[1:].index(event)
            elif line.startswith("calls="):
                after_calls = True
            elif m := re.match(r"(c?)(ob|fn)=\((\d+)\)(?: (.*))?", line.rstrip("\n")):
                called, kind, ident, name = m.groups()
                if name is not None:
                    names[kind][ident] = name
                if not called:
                    if kind == "ob":
                        obj = names["ob"][ident]
                    else:
                        fn = names["fn"][ident]
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload", choices=("decode", "mlp_step", "mlp_step_default"), default="decode"
    )
    parser.add_argument("--tokens", type=int, default=8)
    parser.add_argument("--decodes", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="mlp_step: training steps")
    parser.add_argument("--native", default="cpu")
    parser.add_argument("--cache-sim", action="store_true", help="also count I1 cache misses")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--count-routes", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    counted = subprocess.run(
        [sys.executable, __file__, "--child", "flagos", "--count-routes", *child_args(args)],
        env=_child_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    routed = int(re.search(r"ROUTED (\d+)", counted).group(1))
    flagos_counts = instructions("flagos", args)
    native_counts = instructions(args.native, args)
    flagos, native = flagos_counts["Ir"], native_counts["Ir"]
    if args.workload == "decode":
        units, unit = args.tokens * args.decodes, "forward"
        print(f"greedy decode, {args.decodes} x {args.tokens} tokens ({units} forwards)")
    else:
        units, unit = args.steps, "step"
        print(f"{args.workload}, {units} training steps of dispatch_overhead.py's MLP")
    extra = flagos - native
    print(f"instructions on flagos      {flagos:>15,}")
    print(f"instructions on {args.native:<11} {native:>15,}")
    ratio = flagos / native
    print(f"flagos extra                {extra:>15,} ({extra / native:.2%}; ratio {ratio:.3f})")
    print(f"  per {unit:<22}{extra / units:>15,.0f}")
    per_call = f"{extra / routed:>15,.0f}"
    print(f"  per routed call           {per_call} ({routed / units:.0f} a {unit})")
    if args.cache_sim:
        f1, n1 = flagos_counts["I1mr"], native_counts["I1mr"]
        print(f"I1 misses on flagos         {f1:>15,}")
        print(f"I1 misses on {args.native:<14} {n1:>15,} (ratio {f1 / n1:.3f})")
        print(f"  flagos extra per routed call {(f1 - n1) / routed:>12,.1f}")
        ours = flagos_counts["I1mr_torch_fl"] / routed
        print(f"  in torch_fl's code per routed call {ours:>6,.1f}")
        own = flagos_counts["Ir_torch_fl"] / routed
        print(f"torch_fl's own instructions per routed call {own:>,.0f}")


if __name__ == "__main__":
    main()
