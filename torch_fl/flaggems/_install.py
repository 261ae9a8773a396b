"""Installing FlagGems kernels on the flagos_python route without importing FlagGems.

`install(ops)` registers, for each operator, a trampoline: on its first call it imports
FlagGems (once, thread-safe), looks the operator up in FlagGems' catalog, registers the real
(adapted) callable in its own place, and calls it. Later calls reach FlagGems' callable with
no Python of ours in between. A kernel registered by the user is never replaced: install skips
operators that have one, and a trampoline only replaces itself.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from torch_fl import _C
from torch_fl.flaggems import _adapt, _catalog, _import

_lock = threading.Lock()
_catalog_cache: _catalog.Catalog | None = None
# op -> what this module registered for it (a trampoline, then FlagGems' callable)
_ours: dict[str, object] = {}


class FlagGemsUnsupported(NotImplementedError):
    """The operator is routed to FlagGems, which does not provide it."""


def catalog() -> _catalog.Catalog:
    """FlagGems' catalog (imports FlagGems)."""
    global _catalog_cache
    if _catalog_cache is None:
        gems = _import.load()
        with _lock:
            if _catalog_cache is None:
                _catalog_cache = _catalog.build(gems)
    return _catalog_cache


def resolve(op: str) -> Callable:
    """The callable the route should call for `op` (canonical name), adapted to the route."""
    _import.load(needed_by=op)
    cat = catalog()
    entry = cat.entries.get(op)
    if entry is None:
        gems = _import.load()
        why = cat.skipped.get(op.removeprefix("aten::"), "it is not in its _FULL_CONFIG")
        short = op.removeprefix("aten::")
        raise FlagGemsUnsupported(
            f"{op} is routed to flagos_python, but FlagGems "
            f"{getattr(gems, '__version__', '?')} does not provide it ({why}); route it "
            f"elsewhere: FLAGOS_OP_{short.replace('.', '__')}=cuda or "
            f"torch_fl.routing.set_route('{short}', 'cuda')"
        )
    overload = _catalog.aten_overload(op)
    assert overload is not None  # the catalog only keeps operators of this torch
    return _adapt.adapt(overload._schema, entry.fn)


class _Trampoline:
    """The first-call stand-in for FlagGems' kernel of one operator."""

    __slots__ = ("op",)

    def __init__(self, op: str) -> None:
        self.op = op

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fn = resolve(self.op)
        with _lock:
            if _C._routing_python_kernel(self.op) is self:  # the user's kernel wins
                _C._routing_register_python_kernel(self.op, fn)
                _ours[self.op] = fn
        return fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<FlagGems kernel of {self.op}, not loaded yet>"


def is_installed(op: str) -> bool:
    """Whether `op`'s flagos_python kernel is FlagGems' (loaded or not)."""
    op = _C._routing_canonical_name(op)
    kernel = _C._routing_python_kernel(op)
    return kernel is not None and kernel is _ours.get(op)


def install(ops: Iterable[str]) -> list[str]:
    """Registers lazy FlagGems kernels for `ops` (names as torch_fl.routing accepts them),
    skipping operators that already have a kernel. Returns the canonical names installed."""
    installed = []
    with _lock:
        for name in ops:
            op = _C._routing_canonical_name(name)
            if _C._routing_python_kernel(op) is not None:
                continue
            trampoline = _Trampoline(op)
            _C._routing_register_python_kernel(op, trampoline)
            _ours[op] = trampoline
            installed.append(op)
    return installed


def uninstall() -> None:
    """Removes every FlagGems kernel this module registered (user kernels stay)."""
    with _lock:
        for op, ours in list(_ours.items()):
            if _C._routing_python_kernel(op) is ours:
                _C._routing_register_python_kernel(op, None)
            del _ours[op]


def routed_to_python() -> list[str]:
    """Operators the table in force (with FLAGOS_OP_* and API overrides) sends to
    flagos_python, for all calls or for those of a size rule."""
    info = _C._routing_table_info()
    ops = {op for op, route in info["table"].items() if route == "flagos_python"}
    for op, rules in info["rules"].items():
        if any(route == "flagos_python" for _, route, _ in rules):
            ops.add(op)
    for op, value in info["env_overrides"].items():
        (ops.add if value.split(" ")[0] == "flagos_python" else ops.discard)(op)
    for op, value in info["api_overrides"].items():
        (ops.add if value == "flagos_python" else ops.discard)(op)
    return sorted(ops)
