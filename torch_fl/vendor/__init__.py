"""Vendor-specific import steps that must run before torch is imported.

Only the dcu accelerator has any: DTK's device libraries are loaded from the package's bundle
before torch (see torch_fl/vendor/dcu.py). This package imports no torch.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def _build_record() -> ModuleType | None:
    try:
        return importlib.import_module("torch_fl._build_config")
    except ImportError:
        return None  # torch_fl._registration.check_build_record explains how to build


def prelude() -> None:
    """Runs the accelerator's pre-torch import step, chosen by the build record."""
    record = _build_record()
    if record is not None and getattr(record, "ACCELERATOR", "") == "dcu":
        from torch_fl.vendor import dcu

        dcu.prelude(record)


def after_load(device_count) -> None:
    """Runs the accelerator's post-load checks (`device_count` is torch.flagos.device_count)."""
    record = _build_record()
    if record is not None and getattr(record, "ACCELERATOR", "") == "dcu":
        from torch_fl.vendor import dcu

        dcu.after_load(device_count)
