"""Host time per operator call on flagos against the native device, interleaved in one process.

On the cpu accelerator the native device is plain CPU tensors: a flagos call runs the same CPU
kernel, reached through the router (route lookup, zero-copy aliasing of arguments, re-labelling
of results), so the ratio is the router's cost against calling the target kernel directly. On
the cuda accelerator the native device is cuda.

    python benchmarks/dispatch_overhead.py [--reps 200] [--calls 50] [--suite ops|transformer]
                                           [--pin-cpu N]

Prints per-operator medians (microseconds per call), their ratio flagos/native, the geometric
mean of the ratios, a small MLP's forward pass (no grad) and one training step, and the
flagos_python route's cost against calling the same Python function directly.
Targets (cpu accelerator): geometric mean <= 1.3, MLP step <= 1.05.

On the cpu accelerator the training step is also split into its parts: `mlp_step_st` runs the
backward on the calling thread for both (autograd multithreading off), `mlp_step_eq` also gives
both the same optimizer implementation, and the `autograd hand-off` line times one flagos
backward on the engine's device thread against the same backward on the calling thread. The
hand-off is torch's (its engine runs the backward of every device but CPU on a worker thread)
and costs what waking a thread on another core costs on the host; `--pin-cpu N` runs the process
on one core, where it is a context switch.

`--suite transformer` times instead the forward operators of the GPT-2 model in
`transformer_e2e.py`, at its shapes and with autograd recording (inputs that require grad),
to find which operators carry the end-to-end gap.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import statistics
from collections.abc import Callable

import torch
from _stats import time_interleaved  # this script's folder is on sys.path

import torch_fl
from torch_fl import routing


def _cases(
    device: str, native: str
) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """name -> (flagos call, native call), each on inputs of its own device."""

    def make(dev: str) -> dict[str, Callable[[], object]]:
        g = torch.Generator().manual_seed(0)
        a = torch.randn(64, 64, generator=g).to(dev)
        b = torch.randn(64, 64, generator=g).to(dev)
        m1 = torch.randn(64, 64, generator=g).to(dev)
        m2 = torch.randn(64, 64, generator=g).to(dev)
        acc = torch.zeros(64, 64).to(dev)
        idx = torch.randint(0, 64, (32,), generator=g).to(dev)
        host = torch.randn(64, 64, generator=g)
        dst = torch.empty(64, 64).to(dev)
        return {
            "add": lambda: a + b,
            "add_": lambda: acc.add_(b),
            "mul_scalar": lambda: a * 2.5,
            "mm_64x64": lambda: torch.mm(m1, m2),
            "sum": lambda: a.sum(),
            "relu": lambda: torch.relu(a),
            "softmax": lambda: torch.softmax(a, dim=1),
            "view": lambda: a.view(4096),
            "index": lambda: a[idx],
            "cat": lambda: torch.cat([a, b]),
            "copy_h2d": lambda: dst.copy_(host),
        }

    flagos_cases = make(device)
    native_cases = make(native)
    return {name: (flagos_cases[name], native_cases[name]) for name in flagos_cases}


def _transformer_cases(
    device: str, native: str
) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """GPT-2 forward operators at transformer_e2e.py's shapes (batch 8, seq 128, width 256,
    4 heads, vocab 8192), inputs requiring grad: name -> (flagos call, native call)."""
    import torch.nn.functional as F

    def make(dev: str) -> dict[str, Callable[[], object]]:
        g = torch.Generator().manual_seed(0)

        def rand(*shape: int, grad: bool = True) -> torch.Tensor:
            return torch.randn(*shape, generator=g).to(dev).requires_grad_(grad)

        x, y, qkv = rand(8, 128, 256), rand(8, 128, 256), rand(8, 128, 768)
        hidden = rand(8, 128, 1024)
        weight, bias = rand(768, 256), rand(768)
        norm_w, norm_b = rand(256), rand(256)
        table = rand(8192, 256)
        ids = torch.randint(0, 8192, (8, 128), generator=g).to(dev)
        q, k, v = (rand(8, 4, 128, 64) for _ in range(3))
        logits = rand(1024, 8192)
        labels = torch.randint(0, 8192, (1024,), generator=g).to(dev)
        return {
            "add": lambda: x + y,
            "mul_scalar": lambda: hidden * 0.5,
            "tanh": lambda: torch.tanh(hidden),
            "pow": lambda: torch.pow(hidden, 3.0),
            "dropout": lambda: F.dropout(x, 0.1, training=True),
            "layer_norm": lambda: F.layer_norm(x, (256,), norm_w, norm_b),
            "linear": lambda: F.linear(x, weight, bias),
            "embedding": lambda: F.embedding(ids, table),
            "arange": lambda: torch.arange(128, device=dev),
            "split_view": lambda: [
                t.view(8, 128, 4, 64).transpose(1, 2) for t in qkv.split(256, -1)
            ],
            "sdpa": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            "sdpa_dropout": lambda: F.scaled_dot_product_attention(
                q, k, v, dropout_p=0.1, is_causal=True
            ),
            "cross_entropy": lambda: F.cross_entropy(logits, labels),
        }

    flagos_cases = make(device)
    native_cases = make(native)
    return {name: (flagos_cases[name], native_cases[name]) for name in flagos_cases}


def _mlp(dev: str, train: bool = True, foreach: bool | None = None) -> Callable[[], object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, foreach=foreach)
    x = torch.randn(32, 64).to(dev)
    y = torch.randint(0, 10, (32,)).to(dev)

    def forward() -> object:
        with torch.no_grad():
            return model(x)

    def step() -> object:
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step if train else forward


def _sync(dev: str) -> None:
    if dev.startswith("cuda"):
        torch.cuda.synchronize()
    elif dev.startswith("flagos"):
        torch.flagos.synchronize()


def _medians(
    runs: dict[tuple[str, str], Callable[[], object]], reps: int, calls: int
) -> dict[tuple[str, str], float]:
    """Median microseconds per call of each run, keyed (name, device), after a warm-up (caches,
    allocator, route resolution, the engine's threads): `reps` rounds of `calls` calls each,
    the runs interleaved (_stats.time_interleaved)."""
    for _ in range(max(3, calls // 5)):
        for run in runs.values():
            run()
    times = time_interleaved(runs, reps, calls, lambda key: _sync(key[1]))
    return {key: statistics.median(t) * 1e6 for key, t in times.items()}


def _interleaved(
    fl: Callable[[], object],
    nat: Callable[[], object],
    fl_dev: str,
    nat_dev: str,
    reps: int,
    calls: int,
) -> tuple[float, float]:
    """Median microseconds per call of each, alternating batches of `calls` calls."""
    t = _medians({("flagos", fl_dev): fl, ("native", nat_dev): nat}, reps, calls)
    return t[("flagos", fl_dev)], t[("native", nat_dev)]


def _python_route_cost(reps: int, calls: int) -> tuple[float, float]:
    """flagos_python route (relu kernel in Python) against calling the function directly."""

    def kernel(self):
        return torch.relu(self)

    a = torch.randn(64, 64, device="flagos")
    native = torch_fl._C._flagos_to_native_view(a)  # the tensor the route hands the kernel
    routing.register_python_kernel("aten::relu", kernel)
    with routing.route("aten::relu", "flagos_python"):
        result = _interleaved(
            lambda: torch.relu(a), lambda: kernel(native), "flagos", str(native.device), reps, calls
        )
    routing.register_python_kernel("aten::relu", None)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200, help="interleaved repetitions")
    parser.add_argument("--calls", type=int, default=50, help="calls per timed batch")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--suite", choices=("ops", "transformer"), default="ops")
    parser.add_argument(
        "--pin-cpu", type=int, default=None, help="run on this CPU only (os.sched_setaffinity)"
    )
    args = parser.parse_args()
    if args.pin_cpu is not None:
        # Before the first backward: the autograd engine's threads inherit the affinity.
        os.sched_setaffinity(0, {args.pin_cpu})
    torch.set_num_threads(args.threads)

    accel = torch_fl.build_config.ACCELERATOR
    fl_dev = "flagos"
    nat_dev = "cpu" if accel == "cpu" else "cuda"
    print(
        f"torch {torch.__version__}, torch_fl accelerator {accel}, python "
        f"{platform.python_version()}, {platform.machine()}, threads {args.threads}"
        + (f", pinned to cpu {args.pin_cpu}" if args.pin_cpu is not None else "")
    )
    print(f"interleaved: {args.reps} reps x {args.calls} calls, medians; flagos vs {nat_dev}")
    print(f"{'op':<12} {'flagos us':>10} {'native us':>10} {'ratio':>7}")
    ratios = []
    cases = _cases if args.suite == "ops" else _transformer_cases
    for name, (fl, nat) in cases(fl_dev, nat_dev).items():
        t_fl, t_nat = _interleaved(fl, nat, fl_dev, nat_dev, args.reps, args.calls)
        ratios.append(t_fl / t_nat)
        print(f"{name:<12} {t_fl:>10.2f} {t_nat:>10.2f} {t_fl / t_nat:>7.3f}")
    geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"{'geomean':<12} {'':>10} {'':>10} {geomean:>7.3f}")
    if args.suite == "transformer":
        return

    t_fl, t_nat = _interleaved(
        _mlp(fl_dev, False),
        _mlp(nat_dev, False),
        fl_dev,
        nat_dev,
        max(20, args.reps // 4),
        max(5, args.calls // 5),
    )
    print(f"{'mlp_forward':<12} {t_fl:>10.2f} {t_nat:>10.2f} {t_fl / t_nat:>7.3f}")
    # A native CUDA backward cannot run in a process where a PrivateUse1 backend is registered
    # (pytorch/pytorch#161129): on device accelerators the training step is compared in
    # benchmarks/transformer_e2e.py, whose native runs are separate processes.
    if accel != "cpu":
        print("mlp_step: see benchmarks/transformer_e2e.py (native backward: own process)")
    else:
        _mlp_step_parts(fl_dev, nat_dev, max(20, args.reps // 2), max(5, args.calls // 5))

    t_py, t_direct = _python_route_cost(max(20, args.reps // 2), args.calls)
    print(
        f"flagos_python route (relu kernel in Python): {t_py:.2f} us per call against "
        f"{t_direct:.2f} us calling the function directly (+{t_py - t_direct:.2f} us)"
    )


# The MLP training step and the same step with torch's per-device choices made alike, all six
# runs interleaved in one loop so every ratio is taken under the same host conditions.
_STEP_VARIANTS = {
    "mlp_step": ("", True, None),
    # The autograd engine runs the backward of device tensors on a per-device worker thread
    # (CPU tensors: on the calling thread), so a step on flagos pays a thread hand-off that
    # plain CPU does not; multithreading off runs both on the calling thread.
    "mlp_step_st": (
        "autograd multithreading off: backward on the calling thread for both",
        False,
        None,
    ),
    # torch's SGD defaults to its foreach implementation on PrivateUse1 devices and to a
    # per-tensor loop on CPU; with both choices equal only the router differs.
    "mlp_step_eq": (
        "as mlp_step_st, and SGD(foreach=False) on both: same implementation choices",
        False,
        False,
    ),
}


def _mlp_step_variant(dev: str, multithreading: bool, foreach: bool | None) -> Callable[[], object]:
    """One MLP training step with the autograd engine's multithreading and the optimizer's
    foreach choice given (decode_instructions.py's --workload mlp_step counts it too)."""
    step = _mlp(dev, True, foreach=foreach)

    def run() -> object:
        with torch.autograd.set_multithreading_enabled(multithreading):
            return step()

    return run


def _mlp_step_parts(fl_dev: str, nat_dev: str, reps: int, calls: int) -> None:
    runs = {
        (name, dev): _mlp_step_variant(dev, multithreading, foreach)
        for name, (_, multithreading, foreach) in _STEP_VARIANTS.items()
        for dev in (fl_dev, nat_dev)
    }
    times = _medians(runs, reps, calls)
    for name, (note, _, _) in _STEP_VARIANTS.items():
        t_fl, t_nat = times[(name, fl_dev)], times[(name, nat_dev)]
        print(
            f"{name:<12} {t_fl:>10.2f} {t_nat:>10.2f} {t_fl / t_nat:>7.3f}"
            + (f"   ({note})" if note else "")
        )
    t_thread, t_caller = _interleaved(
        _one_node_backward(), _one_node_backward(on_caller=True), fl_dev, fl_dev, reps, calls
    )
    print(
        f"autograd hand-off: a one-node flagos backward takes {t_thread:.2f} us on the engine's "
        f"device thread against {t_caller:.2f} us on the calling thread "
        f"(+{t_thread - t_caller:.2f} us per backward, torch's)"
    )


def _one_node_backward(on_caller: bool = False) -> Callable[[], object]:
    """x.sum().backward() on flagos; `on_caller`: with autograd multithreading off, so the
    engine runs it on the calling thread (what it does for CPU tensors)."""
    x = torch.ones(4, device="flagos", requires_grad=True)

    def backward() -> object:
        with torch.autograd.set_multithreading_enabled(not on_caller):
            x.sum().backward()
        return x

    return backward


if __name__ == "__main__":
    main()
