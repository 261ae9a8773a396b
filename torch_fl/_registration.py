"""Import-time steps of torch_fl, each a function so the order in __init__ reads as a list."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import torch

_REBUILD = "pip install --no-build-isolation -e . (in the torch_fl source tree)"


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def check_build_record() -> ModuleType:
    """The build record must exist and match the installed torch's minor version."""
    try:
        record = importlib.import_module("torch_fl._build_config")
    except ImportError as exc:
        raise ImportError(
            f"torch_fl has not been built (no torch_fl/_build_config.py); build it with: {_REBUILD}"
        ) from exc
    if _minor(record.TORCH_VERSION) != _minor(torch.__version__):
        raise ImportError(
            f"torch_fl was built against torch {record.TORCH_VERSION} but torch "
            f"{torch.__version__} is installed; its C++ core only loads into the torch minor "
            f"version it was built for. Rebuild it with: {_REBUILD}"
        )
    return record


def claim_privateuse1(name: str) -> None:
    """Renames PrivateUse1 to `name`, refusing if another plugin owns it already."""
    current = torch._C._get_privateuse1_backend_name()
    if current == name:
        return
    if current != "privateuseone":
        raise RuntimeError(
            f"PrivateUse1 is already registered as '{current}' by another device plugin, so "
            f"torch_fl cannot register '{name}' in this process. Use one PrivateUse1 plugin per "
            "process; to stop plugins loading with `import torch`, set "
            "TORCH_DEVICE_BACKEND_AUTOLOAD=0 and import the one you want."
        )
    torch.utils.rename_privateuse1_backend(name)


def load_core() -> ModuleType:
    """Loads the C++ core (registers the device with c10/ATen) and checks its configuration."""
    from torch_fl import _C

    error = _C._config_error()
    if error:
        raise RuntimeError(f"torch_fl configuration error: {error}")
    return _C


def register_python_side(name: str, device_module: ModuleType) -> None:
    """torch.<name>, Tensor/Module/Storage methods (storage ones make torch.load work)."""
    if getattr(torch, name, None) is device_module:
        return
    torch._register_device_module(name, device_module)
    # torch registers the module alone; `import torch.flagos.amp` (as `import torch.cuda.amp`)
    # must then find the submodules already loaded, not load their files again under a second
    # name (whose classes would differ from the ones torch.flagos holds).
    for sub in ("memory", "amp", "graphs"):
        sys.modules.setdefault(f"torch.{name}.{sub}", getattr(device_module, sub))
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_packed_sequence=True, for_storage=True
    )
