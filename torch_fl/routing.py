"""Per-operator routing: see and change which implementation runs each operator on flagos.

Every operator without a flagos kernel of its own runs through one route:

* ``cpu_fallback``: CPU kernels (zero copy on the cpu accelerator; host copies on a device);
* ``cuda``: the vendor's own kernels reached zero-copy (cuda/dcu builds with boxing);
* ``flagos_python``: a Python callable registered here (FlagGems is one provider);
* ``flaggems_cpp``: the FlagGems C++ path (not built yet).

The route of an operator comes, in order of precedence, from :func:`set_route`, a
``FLAGOS_OP_<name>`` environment variable (``.`` written as ``__``), the routing table in force
(``torch_fl/configs/backends_<accelerator>.conf`` as the build record says, or
``FLAGOS_BACKEND_CONFIG=<path>``), and the accelerator's default route.

A table may also give an operator size rules, which route each call by the element count of
its largest tensor argument and the dtype of its first floating-point one (docs/routing.md)::

    mm.default = cuda
    mm.default [numel >= 1048576, dtype = float16|bfloat16] = flagos_python

A call meeting no rule takes the plain route; an override (``set_route``, ``FLAGOS_OP_*``)
replaces the rules too. :func:`get_route` with ``numel``/``dtype`` says what a call would take.

Operator names are written as in ``torch.ops.aten``: ``"aten::add.Tensor"``, ``"add.Tensor"``,
``"relu"`` (or ``"relu.default"``) for an unnamed overload.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import ModuleType

import torch
from torch.utils._pytree import tree_leaves

from torch_fl import _C

ROUTES = ("cpu_fallback", "cuda", "flagos_python", "flaggems_cpp")
CONFIG_DIR = Path(__file__).resolve().parent / "configs"

__all__ = [
    "ROUTES",
    "active_table",
    "available_routes",
    "default_route",
    "fast_operators",
    "get_route",
    "load_table",
    "measure_call",
    "overrides",
    "python_kernels",
    "reaches_router",
    "route_counts",
    "route_rules",
    "register_provider",
    "register_python_kernel",
    "reset_stats",
    "route",
    "set_route",
    "stats",
    "strict",
    "table_path_for",
]


def table_path_for(build_config: ModuleType) -> Path:
    """The shipped table a build uses: backends_<accelerator>.conf, or backends_flaggems.conf
    for a cuda build with FlagGems."""
    accelerator = build_config.ACCELERATOR
    if accelerator == "cuda" and getattr(build_config, "BUILD_FLAGGEMS", False):
        return CONFIG_DIR / "backends_flaggems.conf"
    return CONFIG_DIR / f"backends_{accelerator}.conf"


def _chosen_table(build_config: ModuleType) -> tuple[Path, str]:
    """The table chosen at import (path, how): FLAGOS_BACKEND_CONFIG, else the build record's."""
    explicit = os.environ.get("FLAGOS_BACKEND_CONFIG")
    if explicit:
        path = Path(explicit).expanduser().resolve()
        if not path.is_file():
            why = "does not exist" if not path.exists() else "is not a file"
            raise RuntimeError(
                f"FLAGOS_BACKEND_CONFIG={explicit!r}: {path} {why}. Point it at a routing table "
                f"(docs/routing.md), or unset it to use the build's {table_path_for(build_config)}"
            )
        return path, "FLAGOS_BACKEND_CONFIG"
    return table_path_for(build_config), f"build record (ACCELERATOR={build_config.ACCELERATOR!r})"


# The table chosen at import (path, how), which load_table() goes back to: the environment and
# the working directory of that moment, not of the later call.
_import_choice: tuple[Path, str] | None = None


def _load_at_import(build_config: ModuleType) -> None:
    """Loads the table in force and the FLAGOS_OP_*/FLAGOS_LOG/FLAGOS_STRICT variables; errors
    raise here, so at `import torch_fl`."""
    global _import_choice
    path, origin = _chosen_table(build_config)
    _C._routing_load(str(path), origin)
    _import_choice = (path, origin)


def load_table(path: str | os.PathLike | None = None) -> None:
    """Makes the table at `path` the one in force (None: the one chosen at import again, from
    FLAGOS_BACKEND_CONFIG or the build record). Overrides from the environment and
    :func:`set_route` stay; a table with an error raises and changes nothing. In a build with
    FlagGems, the operators the new table sends to flagos_python get FlagGems' kernels (lazily,
    as at import) unless they have a kernel already."""
    from torch_fl import _build_config, flaggems

    if path is None:
        chosen, origin = _import_choice or _chosen_table(_build_config)
    else:
        chosen, origin = Path(path).expanduser().resolve(), "torch_fl.routing.load_table"
    _C._routing_load_table(str(chosen), origin)
    flaggems.install_at_import(_build_config)


def _canonical(op: str) -> str:
    return _C._routing_canonical_name(op)


def get_route(op: str, numel: int | None = None, dtype: torch.dtype | str | None = None) -> str:
    """The route that runs `op` now. With size rules in force, that is the route of calls that
    meet none of them, unless `numel` (the element count of the call's largest tensor argument)
    or `dtype` (its first floating-point tensor argument's) is given: then the route such a call
    takes (an omitted numel counts as 0, an omitted dtype meets no dtype condition)."""
    if numel is None and dtype is None:
        return _C._routing_describe(op)[0]
    if isinstance(dtype, torch.dtype):
        dtype = str(dtype).removeprefix("torch.")
    return _C._routing_route_for(op, 0 if numel is None else int(numel), dtype)


def measure_call(args: tuple = (), kwargs: dict | None = None) -> tuple[int, str | None]:
    """What a size rule measures on a call with these arguments (the router's own CallSize,
    csrc/aten/routing/size_rules.h): the element count of the largest tensor argument, and the
    dtype name of the first floating-point or complex tensor argument, else of the first tensor
    argument (None without tensors; Python numbers are not tensors here, as the router ignores
    the 0-dim tensors torch wraps them in). Tensors inside lists count. `get_route(op,
    *measure)` is then the route such a call takes."""
    tensors = [v for v in tree_leaves((args, kwargs or {})) if isinstance(v, torch.Tensor)]
    return _C._routing_measure(tensors)


def route_rules(op: str) -> list[tuple[str, str, str]]:
    """The size rules that route `op`'s calls now, in table order: (condition, route,
    "file:line"). Empty when the table gives none or an override replaces them."""
    return list(_C._routing_describe(op)[2])


def route_origin(op: str) -> str:
    """Where `op`'s route comes from: 'default', 'table <file>:<line>', 'env FLAGOS_OP_...' or
    'api'."""
    return _C._routing_describe(op)[1]


def set_route(op: str, route: str | None) -> None:
    """Routes `op` to `route` from now on (None drops this override). Raises for unknown
    operators, unknown routes and routes this build cannot run."""
    _C._routing_set_route(op, route)


# op -> the routes of its open `route` blocks, oldest first, after (None, the override the
# first block found). Blocks may close in any order (other threads): the override is always the
# newest open block's, and the one found before the first block once all have closed.
_open_blocks: dict[str, list[tuple[object | None, str | None]]] = {}
_open_blocks_lock = threading.Lock()


@contextlib.contextmanager
def route(op: str, route_name: str) -> Iterator[None]:
    """``with torch_fl.routing.route("aten::add.Tensor", "flagos_python"): ...``

    The override is process-wide (calls on every thread take it). Blocks may overlap across
    threads and close in any order: while any is open the newest open one's route is in force,
    and when the last closes the override it found is restored."""
    canonical = _canonical(op)
    token = object()
    with _open_blocks_lock:
        blocks = _open_blocks.get(canonical) or [(None, _C._routing_get_override(canonical))]
        set_route(canonical, route_name)  # raises for a bad route before anything is kept
        blocks.append((token, route_name))
        _open_blocks[canonical] = blocks
    try:
        yield
    finally:
        with _open_blocks_lock:
            blocks = [b for b in _open_blocks[canonical] if b[0] is not token]
            set_route(canonical, blocks[-1][1])
            if len(blocks) == 1:
                del _open_blocks[canonical]
            else:
                _open_blocks[canonical] = blocks


def overrides() -> dict[str, str]:
    """Operators whose route was changed from the table: by the environment or this API."""
    info = _C._routing_table_info()
    result = dict(info["env_overrides"])
    result.update({op: f"{r} (api)" for op, r in info["api_overrides"].items()})
    return result


def active_table() -> dict:
    """The table in force: path, how it was chosen, default route, its op -> route lines
    ("table") and its size rules ("rules": op -> [(condition, route, "file:line")])."""
    return _C._routing_table_info()


def default_route() -> str:
    return _C._routing_default_route()


def available_routes() -> dict[str, str]:
    """route -> '' when this build can run it, else why not."""
    return {r: _C._routing_unavailable_reason(r) for r in ROUTES}


def register_python_kernel(op: str, fn: Callable | None) -> None:
    """Registers `fn` as `op`'s flagos_python kernel (None removes it). It is called with the
    operator's arguments as in its schema (keyword-only ones as keywords), flagos tensors
    replaced by zero-copy native tensors, and returns what the operator returns. Registering
    does not route the operator: the table, FLAGOS_OP_* or set_route does."""
    _C._routing_register_python_kernel(op, fn)


def register_provider(provider: ModuleType | Mapping[str, Callable]) -> list[str]:
    """Registers many kernels at once: a mapping op -> callable, or a module whose
    ``FLAGOS_KERNELS`` attribute is such a mapping. Returns the canonical names registered."""
    kernels = provider
    if isinstance(provider, ModuleType):
        kernels = getattr(provider, "FLAGOS_KERNELS", None)
        if not isinstance(kernels, Mapping):
            raise TypeError(
                f"provider module {provider.__name__} has no FLAGOS_KERNELS mapping "
                "(operator name -> callable)"
            )
    if not isinstance(kernels, Mapping):
        raise TypeError(f"a provider is a module or a mapping, got {type(provider).__name__}")
    # Validate every entry before registering any, so a bad one registers nothing.
    names = [_canonical(op) for op in kernels]
    for op, fn in kernels.items():
        if fn is not None and not callable(fn):
            raise TypeError(
                f"register_provider: the kernel for {op!r} must be callable, got "
                f"{type(fn).__name__}; nothing was registered"
            )
    for op, fn in kernels.items():
        register_python_kernel(op, fn)
    return names


def python_kernels() -> list[str]:
    """Operators with a registered flagos_python kernel."""
    return sorted(_C._routing_python_kernel_ops())


def stats() -> dict[str, dict[str, int]]:
    """Calls per operator and route since start (or reset_stats), e.g.
    ``{"aten::add.Tensor": {"cpu_fallback": 3}}``."""
    return _C._routing_stats()


def reset_stats() -> None:
    _C._routing_reset_stats()


class _Strict:
    """``strict(None)`` reads the mode, ``strict()`` or ``strict(True)`` sets it, ``with
    strict(): ...`` sets it for a block. In strict mode an operator that would run on
    cpu_fallback with host copies (on a device accelerator) raises an error naming it
    instead."""

    def __init__(self, previous: bool) -> None:
        self._previous = previous

    def __enter__(self) -> _Strict:
        return self

    def __exit__(self, *exc: object) -> None:
        _C._routing_set_strict(self._previous)

    def __bool__(self) -> bool:
        return bool(_C._routing_strict())

    def __repr__(self) -> str:
        return f"torch_fl.routing.strict: {bool(self)}"


def strict(enabled: bool | None = True) -> _Strict:
    """Sets strict mode (True by default; None only reads it); usable as a context manager,
    which restores the previous mode."""
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(
            f"strict(enabled): expected True, False or None (to read the mode), got {enabled!r}"
        )
    previous = bool(_C._routing_strict())
    if enabled is not None:
        _C._routing_set_strict(bool(enabled))
    return _Strict(previous)


def parse_table(path: str | os.PathLike, check_available: bool = True) -> list[tuple]:
    """Parses a routing table without applying it: (op, route, file, line, condition) per line,
    condition being '' for a plain line and the size rule's conditions otherwise. Operator
    names are always checked against the installed torch; routes against this build only when
    `check_available`."""
    return _C._routing_parse_table(str(path), check_available)


def route_counts() -> dict[str, int]:
    """route -> how many operators it serves, over the aten operators that reach the router
    under their own name (those with a CPU or native-device kernel)."""
    return _C._routing_route_counts()


def fast_operators() -> list[str]:
    """Operators served by an unboxed fast kernel: on the build's zero-copy route (cpu_fallback
    on the cpu accelerator, cuda on a device accelerator) they skip the boxed router; on any
    other route they behave exactly as boxed operators. Empty with FLAGOS_FAST_PATH=0."""
    return _C._routing_fast_operators()


def reaches_router(op: str) -> bool:
    """False when a flagos kernel of its own or a composite kernel serves `op` on flagos, so a
    route named for it has no effect (it decomposes into operators that are routed)."""
    return _C._routing_reaches_router(op)
