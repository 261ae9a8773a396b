"""Realistic calls per ATen overload: run code on CPU tensors under a TorchDispatchMode that
records every overload call, forward and backward (`.backward()` runs its ops in this thread
on the CPU), with the arguments it got.

Sources: a small built-in workload of common training operators, then the OpInfo sample
inputs of torch's own test suite (`op_db`), until every wanted overload has enough calls or
the recording budget is spent.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

_DTYPES = (torch.float32, torch.int64, torch.bool)


@dataclasses.dataclass
class Call:
    op: str  # canonical name
    args: tuple
    kwargs: dict[str, Any]

    def describe(self) -> str:
        parts = []
        for value in tree_flatten((self.args, self.kwargs))[0]:
            if isinstance(value, torch.Tensor):
                parts.append(f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}")
        return ", ".join(parts) or "no tensors"


def overload_name(func: torch._ops.OpOverload) -> str:
    schema = func._schema
    return schema.name + (f".{schema.overload_name}" if schema.overload_name else "")


def _usable(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return (
            value.device.type == "cpu"
            and value.layout == torch.strided
            and not value.is_complex()
            and not value.is_quantized
            and value.dtype != torch.float64
        )
    return not isinstance(value, torch.Generator)


def _key(args: tuple, kwargs: dict) -> str:
    def one(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return ("T", str(v.dtype), tuple(v.shape))
        return repr(v)[:80]

    return repr(tree_map(one, (args, kwargs)))


class Recorder(TorchDispatchMode):
    def __init__(self, wanted: set[str], per_op: int, calls: dict[str, list[Call]]) -> None:
        super().__init__()
        self.wanted = wanted
        self.per_op = per_op
        self.calls = calls
        self._seen: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = overload_name(func)
        if name in self.wanted and len(self.calls.get(name, ())) < self.per_op:
            flat = tree_flatten((args, kwargs))[0]
            key = name + _key(args, kwargs)
            if key not in self._seen and all(_usable(v) for v in flat):
                self._seen.add(key)
                saved = tree_map(
                    lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v,
                    (tuple(args), dict(kwargs)),
                )
                self.calls.setdefault(name, []).append(Call(name, *saved))
        return func(*args, **kwargs)

    def done(self) -> bool:
        return all(len(self.calls.get(op, ())) >= self.per_op for op in self.wanted)


def _backward(out: Any) -> None:
    tensors = [
        t
        for t in tree_flatten(out)[0]
        if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()
    ]
    if tensors:
        sum(t.float().sum() for t in tensors).backward()


def _run(recorder: Recorder, fn: Callable[[], Any]) -> None:
    try:
        with recorder:
            _backward(fn())
    except Exception:  # a sample the op rejects records nothing useful; go on
        pass


def workload() -> Iterable[Callable[[], Any]]:
    """Common training operators on small tensors, forward and backward."""
    g = torch.Generator().manual_seed(0)

    def r(*shape: int, grad: bool = True) -> torch.Tensor:
        return torch.randn(*shape, generator=g).requires_grad_(grad)

    F = torch.nn.functional
    yield lambda: r(8, 16) + r(8, 16)
    yield lambda: r(8, 16).add(r(16), alpha=2)
    yield lambda: r(8, 16, grad=False).add_(r(8, 16, grad=False))
    yield lambda: torch.add(r(8, 16, grad=False), r(8, 16, grad=False), out=torch.empty(8, 16))
    yield lambda: r(8, 16) * r(8, 1)
    yield lambda: r(8, 16) / (r(8, 16).abs() + 1)
    yield lambda: (r(8, 16) - r(8, 16)).neg().abs()
    yield lambda: F.relu(r(8, 16)) + F.gelu(r(8, 16)) + F.silu(r(8, 16))
    yield lambda: torch.sigmoid(r(8, 16)) * torch.tanh(r(8, 16))
    yield lambda: r(8, 16).exp()
    yield lambda: (r(8, 16).abs() + 0.1).log()
    yield lambda: (r(8, 16).abs() + 0.1).sqrt().rsqrt()
    yield lambda: r(8, 16).pow(2).sum(dim=1)
    yield lambda: r(8, 16).sum() + r(8, 16).mean(dim=-1, keepdim=True).sum()
    yield lambda: r(8, 16).amax(dim=1)
    yield lambda: F.softmax(r(8, 16), dim=-1)
    yield lambda: F.log_softmax(r(8, 16), dim=1)
    yield lambda: r(16, 32) @ r(32, 8)
    yield lambda: torch.bmm(r(4, 8, 16), r(4, 16, 8))
    yield lambda: F.linear(r(4, 16), r(8, 16), r(8))
    yield lambda: F.layer_norm(r(4, 8, 16), (16,), r(16), r(16))
    yield lambda: F.embedding(torch.randint(0, 10, (4, 6), generator=g), r(10, 8))
    yield lambda: F.cross_entropy(r(8, 5), torch.randint(0, 5, (8,), generator=g))
    yield lambda: F.mse_loss(r(8, 5), r(8, 5))
    yield lambda: torch.cat([r(4, 8), r(2, 8)]) * 2
    yield lambda: torch.where(r(8, 16, grad=False) > 0, r(8, 16), r(8, 16))
    yield lambda: r(8, 16).masked_fill(r(8, 16, grad=False) > 0.5, -1.0)
    yield lambda: r(8, 16).transpose(0, 1).contiguous()
    yield lambda: r(8, 16).clamp(-0.5, 0.5)
    yield lambda: torch.eye(5) + torch.ones(5, 5) + torch.zeros(5, 5)
    yield lambda: F.pad(r(4, 8), (1, 1))
    yield lambda: torch.argmax(r(8, 16, grad=False), dim=1)
    yield lambda: r(8, 16).topk(3, dim=1)


def _opinfo_fns(deadline: float) -> Iterable[Callable[[], Any]]:
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as exc:  # torch's test helpers need `expecttest` (pip install expecttest)
        print(f"verify_routes: OpInfo samples unavailable ({exc}); workload only", flush=True)
        return

    for info in op_db:
        if time.monotonic() > deadline:
            return
        supported = info.supported_dtypes("cpu")
        dtype = next((d for d in _DTYPES if d in supported), None)
        if dtype is None:
            continue
        grad = bool(info.supports_autograd) and dtype.is_floating_point
        try:
            taken = list(itertools.islice(info.sample_inputs("cpu", dtype, requires_grad=grad), 2))
        except Exception:  # an OpInfo whose samples cannot be built here
            continue
        for s in taken:
            yield lambda s=s, info=info: info(s.input, *s.args, **s.kwargs)


def record(
    wanted: Iterable[str], per_op: int = 2, budget_s: float = 90.0, use_opinfo: bool = True
) -> dict[str, list[Call]]:
    """Up to `per_op` distinct calls of each wanted overload (canonical names)."""
    recorder = Recorder(set(wanted), per_op, {})
    deadline = time.monotonic() + budget_s
    sources: list[Iterable[Callable[[], Any]]] = [workload()]
    if use_opinfo:
        sources.append(_opinfo_fns(deadline))
    for source in sources:
        for fn in source:
            if recorder.done() or time.monotonic() > deadline:
                return recorder.calls
            _run(recorder, fn)
    return recorder.calls
