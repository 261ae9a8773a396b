"""The main operator suite: common training and inference operators, forward and backward.

Each case builds its inputs on the CPU from a seeded generator, so any device (flagos, cuda,
cpu) can run it on identical data. `run_case` returns outputs and input gradients on the CPU.
This module must not import torch_fl: the cuda reference runs in a process without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

Inputs = list[Any]


@dataclass(frozen=True)
class OpCase:
    name: str
    make_inputs: Callable[[torch.Generator, torch.dtype], Inputs]
    fn: Callable[..., Any]
    grad: bool = True
    dtypes: Sequence[torch.dtype] = (torch.float32,)
    rtol: float = 1.3e-5
    atol: float = 1e-5
    tags: frozenset[str] = field(default_factory=frozenset)

    def ids(self) -> list[str]:
        return [f"{self.name}-{str(d).removeprefix('torch.')}" for d in self.dtypes]


def randn(*shape: int) -> Callable[[torch.Generator, torch.dtype], torch.Tensor]:
    return lambda g, dt: torch.randn(*shape, generator=g).to(dt)


def rand_pos(*shape: int) -> Callable[[torch.Generator, torch.dtype], torch.Tensor]:
    return lambda g, dt: (torch.rand(*shape, generator=g) + 0.1).to(dt)


def ints(high: int, *shape: int) -> Callable[[torch.Generator, torch.dtype], torch.Tensor]:
    return lambda g, dt: torch.randint(0, high, shape, generator=g)


def inputs(*makers: Any) -> Callable[[torch.Generator, torch.dtype], Inputs]:
    return lambda g, dt: [m(g, dt) if callable(m) else m for m in makers]


def _transposed(g: torch.Generator, dt: torch.dtype) -> torch.Tensor:
    return torch.randn(24, 16, generator=g).to(dt).t()


FLOATS = (torch.float32, torch.bfloat16)

CASES: list[OpCase] = [
    OpCase("add", inputs(randn(8, 16), randn(8, 16)), torch.add, dtypes=FLOATS),
    OpCase("add_broadcast", inputs(randn(8, 16), randn(16)), torch.add),
    OpCase(
        "add_scalar_alpha", inputs(randn(8, 16), randn(8, 16)), lambda a, b: a.add(b, alpha=2.5)
    ),
    OpCase("sub", inputs(randn(8, 16), randn(1, 16)), torch.sub),
    OpCase("mul", inputs(randn(8, 16), randn(8, 1)), torch.mul, dtypes=FLOATS),
    OpCase("mul_scalar", inputs(randn(8, 16)), lambda a: a * 3.0),
    OpCase("div", inputs(randn(8, 16), rand_pos(8, 16)), torch.div),
    OpCase("pow", inputs(rand_pos(8, 16)), lambda a: a.pow(2.5)),
    OpCase("exp", inputs(randn(8, 16)), torch.exp),
    OpCase("log", inputs(rand_pos(8, 16)), torch.log),
    OpCase("sqrt", inputs(rand_pos(8, 16)), torch.sqrt),
    OpCase("rsqrt", inputs(rand_pos(8, 16)), torch.rsqrt),
    OpCase("abs", inputs(randn(8, 16)), torch.abs),
    OpCase("neg", inputs(randn(8, 16)), torch.neg),
    OpCase("clamp", inputs(randn(8, 16)), lambda a: a.clamp(-0.5, 0.5)),
    OpCase("relu", inputs(randn(8, 16)), F.relu, dtypes=FLOATS),
    OpCase("gelu", inputs(randn(8, 16)), F.gelu, dtypes=FLOATS),
    OpCase("gelu_tanh", inputs(randn(8, 16)), lambda a: F.gelu(a, approximate="tanh")),
    OpCase("silu", inputs(randn(8, 16)), F.silu, dtypes=FLOATS),
    OpCase("sigmoid", inputs(randn(8, 16)), torch.sigmoid),
    OpCase("tanh", inputs(randn(8, 16)), torch.tanh),
    OpCase("softmax", inputs(randn(8, 16)), lambda a: F.softmax(a, dim=-1), dtypes=FLOATS),
    OpCase("log_softmax", inputs(randn(8, 16)), lambda a: F.log_softmax(a, dim=1)),
    OpCase(
        "mm", inputs(randn(16, 32), randn(32, 8)), torch.mm, dtypes=FLOATS, rtol=1e-4, atol=1e-4
    ),
    OpCase("mm_transposed", inputs(_transposed, randn(24, 8)), torch.mm, rtol=1e-4, atol=1e-4),
    OpCase("bmm", inputs(randn(4, 8, 16), randn(4, 16, 8)), torch.bmm, rtol=1e-4, atol=1e-4),
    OpCase(
        "matmul_broadcast",
        inputs(randn(2, 3, 8, 16), randn(16, 4)),
        torch.matmul,
        rtol=1e-4,
        atol=1e-4,
    ),
    OpCase(
        "addmm", inputs(randn(8), randn(4, 16), randn(16, 8)), torch.addmm, rtol=1e-4, atol=1e-4
    ),
    OpCase(
        "linear",
        inputs(randn(4, 16), randn(8, 16), randn(8)),
        F.linear,
        dtypes=FLOATS,
        rtol=1e-4,
        atol=1e-4,
    ),
    OpCase(
        "conv2d",
        inputs(randn(2, 3, 10, 10), randn(4, 3, 3, 3), randn(4)),
        lambda x, w, b: F.conv2d(x, w, b, padding=1),
        rtol=1e-4,
        atol=1e-4,
    ),
    OpCase("max_pool2d", inputs(randn(2, 3, 8, 8)), lambda x: F.max_pool2d(x, 2)),
    OpCase("avg_pool2d", inputs(randn(2, 3, 8, 8)), lambda x: F.avg_pool2d(x, 2)),
    OpCase(
        "adaptive_avg_pool2d", inputs(randn(2, 3, 9, 9)), lambda x: F.adaptive_avg_pool2d(x, (3, 3))
    ),
    OpCase(
        "interpolate_nearest",
        inputs(randn(1, 2, 4, 4)),
        lambda x: F.interpolate(x, scale_factor=2, mode="nearest"),
    ),
    OpCase(
        "layer_norm",
        inputs(randn(4, 8, 16), randn(16), randn(16)),
        lambda x, w, b: F.layer_norm(x, (16,), w, b),
        dtypes=FLOATS,
        rtol=1e-4,
        atol=1e-4,
    ),
    OpCase(
        "rms_norm",
        inputs(randn(4, 16), randn(16)),
        lambda x, w: F.rms_norm(x, (16,), w),
        rtol=1e-4,
        atol=1e-4,
    ),
    OpCase(
        "group_norm", inputs(randn(2, 4, 5, 5)), lambda x: F.group_norm(x, 2), rtol=1e-4, atol=1e-4
    ),
    OpCase(
        "batch_norm_train",
        inputs(randn(8, 4, 3, 3), randn(4), randn(4)),
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        rtol=1e-4,
        atol=1e-4,
    ),
    OpCase("embedding", inputs(ints(10, 4, 6), randn(10, 8)), F.embedding),
    OpCase("cross_entropy", inputs(randn(8, 5), ints(5, 8)), F.cross_entropy, dtypes=FLOATS),
    OpCase("mse_loss", inputs(randn(8, 5), randn(8, 5)), F.mse_loss),
    OpCase("sum", inputs(randn(8, 16)), torch.sum, dtypes=FLOATS),
    OpCase("sum_dim", inputs(randn(8, 16)), lambda a: a.sum(dim=0)),
    OpCase("mean", inputs(randn(8, 16)), lambda a: a.mean(dim=-1, keepdim=True)),
    OpCase("var", inputs(randn(8, 16)), lambda a: a.var(dim=1)),
    OpCase("amax", inputs(randn(8, 16)), lambda a: a.amax(dim=1)),
    OpCase("max_dim", inputs(randn(8, 16)), lambda a: a.max(dim=1)),
    OpCase("argmax", inputs(randn(8, 16)), lambda a: a.argmax(dim=1), grad=False),
    OpCase("topk", inputs(randn(8, 16)), lambda a: a.topk(3, dim=1)),
    OpCase("sort", inputs(randn(8, 16)), lambda a: a.sort(dim=1)),
    OpCase("cumsum", inputs(randn(8, 16)), lambda a: a.cumsum(dim=1)),
    OpCase("cat", inputs(randn(4, 8), randn(2, 8)), lambda a, b: torch.cat([a, b])),
    OpCase("stack", inputs(randn(4, 8), randn(4, 8)), lambda a, b: torch.stack([a, b], 1)),
    OpCase(
        "transpose_contiguous", inputs(randn(4, 8, 6)), lambda a: a.transpose(0, 2).contiguous()
    ),
    OpCase("permute_reshape", inputs(randn(4, 8, 6)), lambda a: a.permute(2, 0, 1).reshape(6, 32)),
    OpCase("expand_mul", inputs(randn(4, 1), randn(1, 6)), lambda a, b: a.expand(4, 6) * b),
    OpCase("index_tensor", inputs(randn(8, 16), ints(8, 5)), lambda a, i: a[i]),
    OpCase("index_select", inputs(randn(8, 16), ints(16, 5)), lambda a, i: a.index_select(1, i)),
    OpCase("gather", inputs(randn(8, 16), ints(16, 8, 4)), lambda a, i: a.gather(1, i)),
    OpCase(
        "scatter_add",
        inputs(randn(8, 16), ints(16, 8, 4), randn(8, 4)),
        lambda a, i, s: a.scatter_add(1, i, s),
    ),
    OpCase(
        "masked_fill", inputs(randn(8, 16), randn(8, 16)), lambda a, m: a.masked_fill(m > 0.5, -1.0)
    ),
    OpCase(
        "where",
        inputs(randn(8, 16), randn(8, 16), randn(8, 16)),
        lambda c, a, b: torch.where(c > 0, a, b),
    ),
    OpCase("narrow_slice", inputs(randn(8, 16)), lambda a: a[1:7:2, ::3] * 2),
    OpCase(
        "sdpa",
        inputs(randn(2, 4, 8, 16), randn(2, 4, 8, 16), randn(2, 4, 8, 16)),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        rtol=1e-4,
        atol=1e-4,
    ),
    OpCase(
        "einsum",
        inputs(randn(4, 8, 16), randn(4, 16, 5)),
        lambda a, b: torch.einsum("bij,bjk->bik", a, b),
        rtol=1e-4,
        atol=1e-4,
    ),
    OpCase("dropout_eval", inputs(randn(8, 16)), lambda a: F.dropout(a, 0.5, training=False)),
    OpCase("nonzero", inputs(randn(8, 16)), lambda a: (a > 0).nonzero(), grad=False),
    OpCase("eq_any", inputs(randn(8, 16)), lambda a: ((a > 0) == (a < 1)).any(dim=1), grad=False),
]

TOLERANCE_BF16 = {"rtol": 1.6e-2, "atol": 1e-2}


def _to_device(value: Any, device: str, dtype: torch.dtype, grad: bool) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    moved = value.to(device)
    if grad and moved.is_floating_point():
        moved.requires_grad_(True)
    return moved


def _flat(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in out if isinstance(t, torch.Tensor)]


def run_case(case: OpCase, dtype: torch.dtype, device: str) -> dict[str, list[torch.Tensor]]:
    """Runs one case on `device`; returns CPU copies of outputs and input gradients."""
    g = torch.Generator().manual_seed(1234)
    raw = case.make_inputs(g, dtype)
    args = [_to_device(v, device, dtype, case.grad) for v in raw]
    outputs = _flat(case.fn(*args))
    result = {"outputs": [o.detach().cpu() for o in outputs], "grads": []}
    differentiable = [o for o in outputs if o.requires_grad]
    if case.grad and differentiable:
        wg = torch.Generator().manual_seed(99)
        total = sum(
            (o.float() * torch.randn(o.shape, generator=wg).to(o.device)).sum()
            for o in differentiable
        )
        total.backward()
        # Inputs the output does not depend on differentiably (masks) get no gradient: None.
        result["grads"] = [
            None if a.grad is None else a.grad.detach().cpu()
            for a in args
            if isinstance(a, torch.Tensor) and a.requires_grad
        ]
    return result


def all_params() -> list[tuple[OpCase, torch.dtype]]:
    return [(case, dtype) for case in CASES for dtype in case.dtypes]


def main(argv: Sequence[str] | None = None) -> None:
    """Reference runner: `python cases.py DEVICE OUT` saves every case's results on DEVICE."""
    import sys

    device, out = (argv or sys.argv[1:])[:2]
    results = {}
    for case, dtype in all_params():
        key = f"{case.name}-{dtype}"
        try:
            results[key] = run_case(case, dtype, device)
        except Exception as exc:  # recorded, so the test reports the reference failure
            results[key] = {"error": f"{type(exc).__name__}: {exc}"}
    torch.save(results, out)


if __name__ == "__main__":
    main()
