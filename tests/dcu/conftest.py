"""Shared helpers of the dcu tests: package copies with a doctored build record, fixture bundles."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dcu.fixture_dtk import build_standin, make_dtk_tree

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "torch_fl"))
import _build_switches as switches  # noqa: E402

sys.path.pop(0)

BUNDLE_SCRIPT = ROOT / "scripts" / "vendor" / "bundle_dcu_libtorch.sh"
SHIM = "libflagos_dcu_abi_shim.so"


def installed_torch_version() -> str:
    import torch

    return torch.__version__


def write_record(package: Path, *, boxing=True, vendor_core=False, rocm="/opt/dtk", torch=None):
    """A dcu build record as setup.py writes it (through the same writer)."""
    env = {
        "FLAGOS_ACCELERATOR": "dcu",
        "FLAGOS_BUILD_BOXING": "1" if boxing else "0",
        "FLAGOS_DCU_VENDOR_CORE": "1" if vendor_core else "0",
        "ROCM_PATH": rocm,
    }
    full = torch or installed_torch_version()
    facts = {"version": full.split("+")[0], "full_version": full, "has_hip": True}
    config = switches.resolve(env, facts)
    switches.write_build_record(package / "_build_config.py", config, facts)
    return config


def make_package(tmp: Path, *, full: bool = False) -> Path:
    """A copy of the torch_fl package under tmp/pkg. Not `full`: only vendor/ and an empty
    __init__ (prelude tests); `full`: the whole built package (needs a build in this tree)."""
    package = tmp / "pkg" / "torch_fl"
    if full:
        shutil.copytree(
            ROOT / "torch_fl",
            package,
            ignore=shutil.ignore_patterns("__pycache__", "lib_dcu", "_build_config.py"),
        )
    else:
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        shutil.copytree(
            ROOT / "torch_fl" / "vendor",
            package / "vendor",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    return package


def run_bundle(package: Path, dtk: Path, **env: str) -> subprocess.CompletedProcess:
    run_env = dict(os.environ)
    run_env.pop("FLAGOS_DCU_VENDOR_CORE", None)
    run_env.update(ROCM_PATH=str(dtk), TORCH_FL_PACKAGE_DIR=str(package), PYTHON=sys.executable)
    run_env.update(env)
    return subprocess.run(["bash", str(BUNDLE_SCRIPT)], capture_output=True, text=True, env=run_env)


def stage_shim(package: Path) -> Path:
    """What build_ext leaves in lib_dcu for the default layout (a stand-in shim suffices here)."""
    return build_standin(package / "lib_dcu" / SHIM)


@pytest.fixture
def dtk(tmp_path: Path) -> Path:
    return make_dtk_tree(
        tmp_path / "opt" / "dtk",
        torch_version=installed_torch_version(),
        cuda_dir=None,
        miopen=False,
    )


def run_python(code: str, package: Path, **env: str) -> subprocess.CompletedProcess:
    run_env = dict(os.environ)
    run_env["PYTHONPATH"] = str(package.parent)
    run_env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    run_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=run_env,
        cwd=package.parent,
    )
