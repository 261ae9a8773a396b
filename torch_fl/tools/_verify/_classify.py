"""Operators never routed to FlagGems, whatever their kernels do: views (their results must
share the input's storage and autograd view tracking, which only flagos' own view kernels
give), CompositeImplicitAutograd operators (a kernel for them would bypass their
decomposition and its autograd formula), random operators (results cannot be compared), and
operators whose calls never reach the router (a flagos or composite kernel serves them)."""

from __future__ import annotations

import torch

from torch_fl import routing
from torch_fl.flaggems import aten_overload


def is_view(overload: torch._ops.OpOverload) -> bool:
    if torch.Tag.view_copy in overload.tags:
        return False
    if getattr(overload, "is_view", False):
        return True
    for ret in overload._schema.returns:
        info = ret.alias_info
        if info is not None and not info.is_write:
            return True
    return False


def never_routed(op: str) -> tuple[str, str] | None:
    """(category, detail) when `op` must stay off FlagGems, else None."""
    overload = aten_overload(op)
    if overload is None:
        return "missing", f"torch {torch.__version__} has no such operator"
    name = str(overload._schema.name) + (
        f".{overload._schema.overload_name}" if overload._schema.overload_name else ""
    )
    if is_view(overload):
        return "view", "a view operator: served by flagos' own view kernels"
    try:
        composite = torch._C._dispatch_has_kernel_for_dispatch_key(
            name, "CompositeImplicitAutograd"
        )
        reaches = routing.reaches_router(op)
    except RuntimeError as err:
        # Python knows the overload but the dispatcher has no such operator (seen with
        # aten::copysign on torch 2.11): nothing can route it.
        return "missing", f"the dispatcher of torch {torch.__version__} has no {name} ({err})"
    if composite:
        return "composite", (
            "CompositeImplicitAutograd: a kernel would bypass its decomposition and autograd"
        )
    if torch.Tag.nondeterministic_seeded in overload.tags:
        return "random", "a random operator: its results cannot be compared"
    if not reaches:
        return "not-routed", "its calls never reach the router (flagos or composite kernel)"
    return None
