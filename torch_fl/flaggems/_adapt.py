"""Fitting a FlagGems callable to the flagos_python route's calling convention.

The route calls a kernel with every schema argument: positional ones by position, keyword-only
ones by name. FlagGems' callables are written for torch.library, whose Python kernels get a
shorter call: trailing positional arguments equal to their default are left out, and so are
keyword-only arguments equal to their default. Most callables accept both; some only the short
one (`eye` takes no `layout`, `_grouped_mm` no `bias`, `multinomial` names its generator
`gen`). `adapt` returns the callable itself when the full call binds (no cost per call), else a
wrapper that makes the torch.library call.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

_NO_DEFAULT = object()


class SignatureMismatch(TypeError):
    """The callable cannot take the operator's arguments at all."""


def _signature(fn: Callable) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # builtins, C callables: assume they follow the schema
        return None


def _binds(sig: inspect.Signature, positional: list[str], keywords: list[str]) -> bool:
    try:
        sig.bind(*positional, **dict.fromkeys(keywords))
    except TypeError:
        return False
    return True


def _default(arg: torch._C.Argument) -> Any:
    return arg.default_value if arg.has_default_value() else _NO_DEFAULT


def _is_default(value: Any, default: Any) -> bool:
    if default is _NO_DEFAULT:
        return False
    if value is default:
        return True
    if isinstance(value, (torch.Tensor, torch.Generator)) or value is None or default is None:
        return False
    try:
        return bool(value == default)
    except Exception:
        return False


def adapt(schema: torch._C.FunctionSchema, fn: Callable) -> Callable:
    """`fn`, or a wrapper calling it as torch.library would. Raises SignatureMismatch when no
    call torch.library could make binds."""
    sig = _signature(fn)
    if sig is None:
        return fn
    args = list(schema.arguments)
    positional = [a.name for a in args if not a.kwarg_only]
    keywords = [a.name for a in args if a.kwarg_only]
    if _binds(sig, positional, keywords):
        return fn
    # Some short call must bind: the required arguments plus any number of the optional
    # positional ones (`_grouped_mm`'s callable needs `offs`, which the schema makes optional).
    required = sum(1 for a in args if not a.kwarg_only and not a.has_default_value())
    required_kw = [a.name for a in args if a.kwarg_only and not a.has_default_value()]
    if not any(
        _binds(sig, positional[:n], required_kw) for n in range(required, len(positional) + 1)
    ):
        raise SignatureMismatch(
            f"{getattr(fn, '__qualname__', fn)}{sig} cannot take the arguments of {schema}"
        )
    return _short_call(fn, sig, args)


def _short_call(fn: Callable, sig: inspect.Signature, args: list) -> Callable:
    pos_defaults = tuple(_default(a) for a in args if not a.kwarg_only)
    kw_defaults = {a.name: _default(a) for a in args if a.kwarg_only}
    accepts_any_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    accepted = set(sig.parameters) if not accepts_any_kw else None
    generators = {a.name for a in args if "Generator" in str(a.type)}

    def call(*values: Any, **kwargs: Any) -> Any:
        n = len(values)
        while n and _is_default(values[n - 1], pos_defaults[n - 1]):
            n -= 1
        short = {}
        for name, value in kwargs.items():
            if _is_default(value, kw_defaults.get(name, _NO_DEFAULT)):
                continue
            if accepted is not None and name not in accepted and name in generators:
                # This callable takes no generator and draws from the device's default one.
                # The route always passes one (the flagos default's native counterpart unless
                # the caller gave one); random operators are never routed to FlagGems by the
                # shipped tables, as their results cannot be compared.
                continue
            short[name] = value
        return fn(*values[:n], **short)

    call.__name__ = getattr(fn, "__name__", "flaggems_kernel")
    call.__qualname__ = getattr(fn, "__qualname__", call.__name__)
    call.__wrapped__ = fn  # type: ignore[attr-defined]
    return call
