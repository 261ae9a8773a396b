"""Operator-suite wiring: every test here is a `main_ops` test; flaggems-marked items are
collected unconditionally, so `-m "flaggems and main_ops"` selects them and leaving the mark
out of `-m` never silently drops a group."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.main_ops)


@pytest.fixture(scope="session")
def reference_device() -> str:
    import torch_fl

    return "cuda" if torch_fl.build_config.ACCELERATOR == "cuda" else "cpu"


@pytest.fixture(scope="session")
def cuda_reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """All cases run on native cuda in a separate process that never loads torch_fl: a CUDA
    backward cannot run where a PrivateUse1 backend is registered (pytorch#161129)."""
    out = tmp_path_factory.mktemp("reference") / "cuda.pt"
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    subprocess.run(
        [sys.executable, str(Path(__file__).parent / "cases.py"), "cuda", str(out)],
        check=True,
        env=env,
    )
    return torch.load(out)
