"""Input variants of a recorded call: the same values on flagos in several memory layouts and
dtypes, so a kernel that assumes contiguous, dense, aligned or float32 inputs is caught.

Variants (each applied to every tensor argument it can apply to):
  contiguous  dense row-major;
  transposed  the last two dimensions swapped in memory (same shape and values);
  broadcast   an input expanded from one slice along its first dimension (stride 0; values
              change, identically for both routes); never for written arguments;
  strided     every other element of a buffer twice as wide in the last dimension;
  unaligned   storage offset of one element, so the data pointer is not 16-byte aligned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

from torch_fl.tools._verify._record import Call

VARIANTS = ("contiguous", "transposed", "broadcast", "strided", "unaligned")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclasses.dataclass
class Case:
    name: str  # e.g. "sample 0, float16, transposed (float16[8, 16], int64[5])"
    make: Callable[[], tuple[tuple, dict]]  # fresh flagos arguments on every call
    dtype: str
    variant: str


def _applies(variant: str, t: torch.Tensor, written: bool) -> bool:
    if variant == "transposed":
        return t.dim() >= 2 and t.shape[-1] > 1 and t.shape[-2] > 1
    if variant == "broadcast":
        return not written and t.dim() >= 1 and t.shape[0] > 1
    if variant == "strided":
        return t.dim() >= 1 and t.shape[-1] > 1
    if variant == "unaligned":
        return t.numel() > 0
    return False


def place(t: torch.Tensor, variant: str, device: str, written: bool) -> torch.Tensor:
    """`t`'s values (or, for broadcast, its first slice expanded) on `device` in `variant`."""
    if not _applies(variant, t, written):
        return t.contiguous().to(device)
    if variant == "transposed":
        return t.transpose(-1, -2).contiguous().to(device).transpose(-1, -2)
    if variant == "broadcast":
        return t.narrow(0, 0, 1).contiguous().to(device).expand(t.shape)
    if variant == "strided":
        wide = torch.zeros(*t.shape[:-1], t.shape[-1] * 2, dtype=t.dtype, device=device)
        view = wide[..., ::2]
        view.copy_(t)
        return view
    buf = torch.zeros(t.numel() + 1, dtype=t.dtype, device=device)  # unaligned
    view = buf[1:].view(t.shape)
    view.copy_(t)
    return view


def written_positions(overload: torch._ops.OpOverload) -> tuple[set[int], set[str]]:
    """Positions and keyword names of the arguments the operator writes (in-place, out=)."""
    positions, names = set(), set()
    for i, arg in enumerate(overload._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            (names.add(arg.name) if arg.kwarg_only else positions.add(i))
    return positions, names


def _convert(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
        return value.to(dtype)
    return value


def cases(
    overload: torch._ops.OpOverload,
    calls: list[Call],
    device: str,
    dtypes: list[str],
    variants: list[str],
) -> list[Case]:
    """Every call in float32 under every variant, and contiguous in the other dtypes (when
    the call has float32 tensors)."""
    positions, names = written_positions(overload)
    out = []
    for n, call in enumerate(calls):
        has_float = any(
            isinstance(v, torch.Tensor) and v.dtype == torch.float32
            for v in list(call.args) + list(call.kwargs.values())
        )
        combos = [("float32", v) for v in variants] if "float32" in dtypes else []
        combos += [(d, "contiguous") for d in dtypes if d != "float32" and has_float]
        for dtype_name, variant in combos:
            dtype = DTYPES[dtype_name]
            args = tuple(_convert(v, dtype) for v in call.args)
            kwargs = {k: _convert(v, dtype) for k, v in call.kwargs.items()}
            if (
                variant != "contiguous"
                and not any(
                    _applies(variant, t, i in positions)
                    for i, v in enumerate(args)
                    for t in _tensors(v)
                )
                and not any(
                    _applies(variant, t, k in names) for k, v in kwargs.items() for t in _tensors(v)
                )
            ):
                continue  # the same as contiguous
            described = Call(call.op, args, kwargs).describe()
            out.append(
                Case(
                    f"sample {n}, {dtype_name}, {variant} ({described})",
                    _maker(args, kwargs, variant, device, positions, names),
                    dtype_name,
                    variant,
                )
            )
    return out


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    return []


def _maker(
    args: tuple, kwargs: dict, variant: str, device: str, positions: set[int], names: set[str]
) -> Callable[[], tuple[tuple, dict]]:
    def make() -> tuple[tuple, dict]:
        def on(written: bool) -> Callable[[Any], Any]:
            def one(v: Any) -> Any:
                return place(v, variant, device, written) if isinstance(v, torch.Tensor) else v

            return one

        new_args = tuple(tree_map(on(i in positions), v) for i, v in enumerate(args))
        new_kwargs = {k: tree_map(on(k in names), v) for k, v in kwargs.items()}
        return new_args, new_kwargs

    return make
