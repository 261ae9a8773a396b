"""Importing FlagGems lazily: on the first operator routed to it, never at `import torch_fl`.

`import flag_gems` is slow (vendor detection, a tuning database, hundreds of kernel wrappers)
and has process-wide side effects, so it waits until a kernel is needed. Right before it,
GEMS_VENDOR gets the vendor of the build (nvidia for cuda, hygon for dcu) unless the user set
it: FlagGems reads it once, at import, to pick its vendor backend.
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType

INSTALL_HINT = "pip install flag-gems"

_lock = threading.Lock()
_module: ModuleType | None = None


class FlagGemsMissing(ImportError):
    """FlagGems is needed (an operator is routed to it) but cannot be imported."""


def build_vendor() -> str:
    """The FlagGems vendor the build implies ('' when it implies none, e.g. cpu)."""
    from torch_fl import build_config

    return str(getattr(build_config, "GEMS_VENDOR", "") or "")


def set_default_vendor() -> str | None:
    """Sets GEMS_VENDOR from the build record unless the user set it; returns the value in
    force (None when neither says one)."""
    vendor = os.environ.get("GEMS_VENDOR")
    if vendor:
        return vendor
    vendor = build_vendor()
    if vendor:
        os.environ["GEMS_VENDOR"] = vendor
        return vendor
    return None


def is_loaded() -> bool:
    return _module is not None


def load(needed_by: str | None = None) -> ModuleType:
    """`flag_gems`, imported on first use (thread-safe). Raises FlagGemsMissing, naming
    `needed_by` (an operator) and how to get around it, when it cannot be imported."""
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is None:
            _check_vendor_triton()
            set_default_vendor()
            try:
                _module = importlib.import_module("flag_gems")
            except ImportError as exc:
                raise FlagGemsMissing(_missing_message(needed_by, exc)) from exc
    return _module


def _check_vendor_triton() -> None:
    """On DCU, FlagGems' kernels need FlagTree's Triton (the `hcu` backend): say so, with the
    install command, before FlagGems fails somewhere deep in its import."""
    from torch_fl import build_config

    if getattr(build_config, "ACCELERATOR", "") == "dcu":
        from torch_fl.vendor import dcu

        dcu.ensure_hcu_triton_once()


def _missing_message(needed_by: str | None, exc: ImportError) -> str:
    what = f"{needed_by} is routed to flagos_python (FlagGems)" if needed_by else "FlagGems"
    op = needed_by.removeprefix("aten::") if needed_by else "<op>"
    env = op.replace(".", "__")
    return (
        f"{what}, but FlagGems cannot be imported ({exc}). Install it with `{INSTALL_HINT}` "
        "(see docs/installation/flaggems.md), or route the operator elsewhere: "
        f"FLAGOS_OP_{env}=cuda or torch_fl.routing.set_route('{op}', 'cuda')"
    )
