"""A copy of setup.py and the package's build-time files, for running `setup.py build_ext` with
a stand-in cmake (no torch_fl import, no build)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def copy_setup_tree(tree: Path) -> Path:
    (tree / "torch_fl").mkdir(parents=True)
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy2(REPO_ROOT / name, tree / name)
    for name in ("__init__.py", "_build_switches.py", "version.py"):
        shutil.copy2(REPO_ROOT / "torch_fl" / name, tree / "torch_fl" / name)
    return tree


def run_build_ext(tree: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`python setup.py build_ext --inplace` in `tree`."""
    return subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=tree,
        capture_output=True,
        text=True,
        env=env,
    )
