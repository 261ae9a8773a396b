"""Which ATen overloads FlagGems implements, and with which callable: read from FlagGems' own
`_FULL_CONFIG`, filtered the way its `enable()` filters it, so the router uses what FlagGems
would register, never a hand-kept list.

`_FULL_CONFIG` entries are `(aten overload name, callable[, condition])`. An entry counts when
its condition holds, the vendor does not list the callable among its unused operators, and the
C++ extension does not patch the overload. Its callables are the module-level names after
`replace_customized_ops`, i.e. the architecture- and vendor-specific versions (hopper `mm` on
an H200).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType

import torch


@dataclasses.dataclass(frozen=True)
class Entry:
    op: str  # canonical: "aten::add.Tensor", "aten::relu"
    fn: Callable
    config_name: str  # as written in _FULL_CONFIG


@dataclasses.dataclass
class Catalog:
    entries: dict[str, Entry]
    # config name -> why it is not offered (condition false, vendor-unused, not in this torch)
    skipped: dict[str, str]


def canonical(config_name: str) -> str:
    """'add.Tensor' -> 'aten::add.Tensor'; 'relu' -> 'aten::relu'; 'relu.default' likewise."""
    name = config_name.removeprefix("aten::")
    return "aten::" + name.removesuffix(".default")


def aten_overload(op: str) -> torch._ops.OpOverload | None:
    """The installed torch's overload for a canonical name, or None."""
    base, _, overload = op.removeprefix("aten::").partition(".")
    packet = getattr(torch.ops.aten, base, None)
    if packet is None:
        return None
    try:
        return getattr(packet, overload or "default")
    except AttributeError:
        return None


def _vendor_unused(gems: ModuleType) -> set[str]:
    vendor = str(getattr(gems, "vendor_name", "") or "")
    if not vendor or vendor == "nvidia":  # FlagGems' Register skips the list for nvidia too
        return set()
    try:
        from flag_gems.runtime import backend

        return set(backend.get_unused_ops(vendor))
    except Exception:  # an older/newer layout: the vendor list is advisory
        return set()


def build(gems: ModuleType) -> Catalog:
    """The catalog of an imported `flag_gems` (or a module with the same `_FULL_CONFIG`)."""
    unused = _vendor_unused(gems)
    patched = set(getattr(getattr(gems, "config", None), "aten_patch_list", None) or ())
    entries: dict[str, Entry] = {}
    skipped: dict[str, str] = {}
    for item in gems._FULL_CONFIG:
        name, fn = item[0], item[1]
        if len(item) > 2 and not item[2]():
            skipped[name] = "its _FULL_CONFIG condition is false for this torch"
            continue
        if getattr(fn, "__name__", "") in unused:
            skipped[name] = f"vendor {gems.vendor_name} lists it as unused"
            continue
        if name in patched:
            skipped[name] = "served by FlagGems' C++ extension (aten_patch_list)"
            continue
        op = canonical(name)
        if aten_overload(op) is None:
            skipped[name] = f"torch {torch.__version__} has no such operator"
            continue
        entries.setdefault(op, Entry(op, fn, name))  # first wins, as torch.library would keep
    return Catalog(entries, skipped)
