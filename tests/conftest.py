"""Shared fixtures of the torch_fl test suite.

Tests marked `gpu` need a real accelerator and are skipped on the `cpu` accelerator, which is
what CI builds. Every test starts and ends on flagos:0 with the default stream, so one test's
device or stream choice never leaks into the next.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import torch_fl

REPO_ROOT = Path(__file__).resolve().parents[1]
ACCELERATOR = torch_fl.build_config.ACCELERATOR


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The build record decides, not a variable: a build without the FlagGems C++ path (every
    # build so far; dcu pins it off) skips the tests of that path.
    if not torch_fl.build_config.BUILD_FLAGGEMS_CPP:
        skip_cpp = pytest.mark.skip(reason="the build record has BUILD_FLAGGEMS_CPP = False")
        for item in items:
            if item.get_closest_marker("flaggems_cpp") is not None:
                item.add_marker(skip_cpp)
    if ACCELERATOR != "cpu":
        return
    skip_gpu = pytest.mark.skip(reason="needs a real accelerator; this build is the cpu one")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _restore_device_state():
    torch.flagos.set_device(0)
    yield
    for index in range(torch.flagos.device_count()):
        torch.flagos.set_stream(torch.flagos.default_stream(index))
    torch.flagos.set_device(0)


@pytest.fixture
def two_devices() -> None:
    """At least flagos:0 and flagos:1 (the cpu accelerator has two unless told otherwise)."""
    if torch.flagos.device_count() < 2:
        pytest.skip("needs two flagos devices")


def run_python(
    code: str,
    env: dict[str, str | None] | None = None,
    path_first: Path | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with `path_first` (default: this checkout) first on
    the path. `env` entries override the environment; a None value removes the variable."""
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(path_first or REPO_ROOT)]
        + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    for key, value in (env or {}).items():
        if value is None:
            full_env.pop(key, None)
        else:
            full_env[key] = value
    return subprocess.run(
        [sys.executable, "-c", code],
        env=full_env,
        cwd=str(path_first or REPO_ROOT),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def python_subprocess():
    """`run_python` as a fixture: fresh interpreters for import-time behaviour."""
    return run_python


def report_from_forked_child(target: Callable[[Any], None]) -> dict:
    """Forks a child that runs `target(queue)` and returns the dict it puts on the queue."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=target, args=(queue,))
    child.start()
    report = queue.get(timeout=60)
    child.join(timeout=60)
    return report
