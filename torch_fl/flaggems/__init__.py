"""FlagGems as the provider of the flagos_python route.

A build with FLAGOS_BUILD_FLAGGEMS=1 installs, at `import torch_fl`, a lazy FlagGems kernel for
every operator its routing table sends to flagos_python. FlagGems itself is imported on the
first such call, with GEMS_VENDOR defaulted from the build record, and its callables run on
zero-copy native (CUDA) aliases of the flagos tensors, on the tensors' device and the current
stream. `flag_gems.enable()` is never called: nothing is registered on the CUDA key, so native
CUDA tensors in the same process keep torch's own kernels.

Which callable serves which ATen overload comes from FlagGems' `_FULL_CONFIG`
(`_catalog.py`); calling conventions are fitted in `_adapt.py`.
"""

from __future__ import annotations

from types import ModuleType

from torch_fl.flaggems._catalog import Catalog, Entry, aten_overload, canonical
from torch_fl.flaggems._import import (
    INSTALL_HINT,
    FlagGemsMissing,
    is_loaded,
    load,
    set_default_vendor,
)
from torch_fl.flaggems._install import (
    FlagGemsUnsupported,
    catalog,
    install,
    is_installed,
    resolve,
    routed_to_python,
    uninstall,
)

__all__ = [
    "INSTALL_HINT",
    "Catalog",
    "Entry",
    "FlagGemsMissing",
    "FlagGemsUnsupported",
    "aten_overload",
    "canonical",
    "catalog",
    "install",
    "install_at_import",
    "is_available",
    "is_installed",
    "is_loaded",
    "load",
    "resolve",
    "routed_to_python",
    "set_default_vendor",
    "uninstall",
]


def is_available() -> bool:
    """Whether FlagGems can be imported (imports it)."""
    try:
        load()
    except FlagGemsMissing:
        return False
    return True


def install_at_import(build_config: ModuleType) -> list[str]:
    """`import torch_fl`'s step (and torch_fl.routing.load_table's): in a build with FlagGems,
    lazy kernels for the operators the table in force routes to flagos_python. Imports
    nothing."""
    if not getattr(build_config, "BUILD_FLAGGEMS", False):
        return []
    return install(routed_to_python())
