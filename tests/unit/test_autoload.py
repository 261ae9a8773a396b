"""`import torch` alone brings torch.flagos (the torch.backends entry point), and
TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns that off. Each case runs in a fresh interpreter."""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

_installed = any(
    ep.name == "flagos" and ep.value == "_torch_fl_autoload:load"
    for ep in entry_points(group="torch.backends")
)
pytestmark = pytest.mark.skipif(
    not _installed, reason="torch_fl is not installed (no torch.backends entry point)"
)

REPORT = (
    "import sys\n"
    "import torch\n"
    "print('LOADED', 'torch_fl' in sys.modules, hasattr(torch, 'flagos'))\n"
    "print('NAME', torch._C._get_privateuse1_backend_name())\n"
)


def test_import_torch_alone_brings_flagos(python_subprocess) -> None:
    code = REPORT + (
        "import torch_fl\n"
        "print('FROM', torch_fl.__file__)\n"
        "t = torch.arange(4.0, device='flagos') * 2\n"
        "print('SUM', t.sum().item(), t.device)\n"
        "print('ACCEL', torch.accelerator.current_accelerator())\n"
    )
    done = python_subprocess(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": None})
    assert done.returncode == 0, done.stderr
    assert "LOADED True True" in done.stdout
    assert "NAME flagos" in done.stdout
    assert f"FROM {REPO_ROOT}" in done.stdout  # the checkout under test, not another install
    assert "SUM 12.0 flagos:0" in done.stdout
    assert "ACCEL flagos" in done.stdout


def test_autoload_disabled(python_subprocess) -> None:
    code = REPORT + (
        "import torch_fl\n"
        "print('AFTER', hasattr(torch, 'flagos'), torch.ones(1, device='flagos').device)\n"
    )
    done = python_subprocess(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert done.returncode == 0, done.stderr
    assert "LOADED False False" in done.stdout
    assert "NAME privateuseone" in done.stdout
    assert "AFTER True flagos:0" in done.stdout  # an explicit import still works


def test_import_torch_fl_first_with_autoload(python_subprocess) -> None:
    code = (
        "import torch_fl\n"
        "import torch\n"
        "print('OK', torch.ones(1, device='flagos').device, torch.flagos is torch_fl.flagos)\n"
    )
    done = python_subprocess(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": None})
    assert done.returncode == 0, done.stderr
    assert "OK flagos:0 True" in done.stdout


def test_explicit_import_after_autoload_is_the_same_module(python_subprocess) -> None:
    code = (
        "import torch\n"
        "flagos_module = torch.flagos\n"
        "import torch_fl\n"
        "print('SAME', torch.flagos is flagos_module is torch_fl.flagos)\n"
    )
    done = python_subprocess(code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"})
    assert done.returncode == 0, done.stderr
    assert "SAME True" in done.stdout
