"""What an installed wheel holds: every file of the package, and a layout that imports.

setuptools' build_py is the step of a wheel build that collects the Python packages and their
data (a wheel is its output plus the compiled extension, which lands in the package folder and
is picked up as package data). The package list once missed two subpackages; an editable
install, which serves files straight from the checkout, could not notice.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import torch_fl

ROOT = Path(__file__).resolve().parents[2]
AUTOLOAD_MODULE = "_torch_fl_autoload.py"


def package_files() -> list[str]:
    """The package's source files: the tracked ones in a git checkout, else those on disk."""
    listed = subprocess.run(
        ["git", "ls-files", "torch_fl", AUTOLOAD_MODULE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode == 0 and listed.stdout.strip():
        return listed.stdout.split()
    found = [p for p in (ROOT / "torch_fl").rglob("*") if p.suffix in (".py", ".conf")]
    return [str(p.relative_to(ROOT)) for p in found if "__pycache__" not in p.parts] + [
        AUTOLOAD_MODULE
    ]


@pytest.fixture(scope="module")
def wheel_layout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """build_py's output for this checkout (its egg-info kept out of the checkout, where it
    would shadow the installed distribution's entry points)."""
    if not (ROOT / "setup.py").is_file() or Path(torch_fl.__file__).parent != ROOT / "torch_fl":
        pytest.skip("needs the torch_fl source checkout")
    tmp = tmp_path_factory.mktemp("wheel")
    done = subprocess.run(
        [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp), "build_py",
         "--build-lib", str(tmp / "lib")],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp / "lib"


def test_a_wheel_carries_every_file_of_the_package(wheel_layout: Path) -> None:
    missing = [f for f in package_files() if not (wheel_layout / f).is_file()]
    assert not missing, f"not packaged (see [tool.setuptools] in pyproject.toml): {missing}"
    built = [Path(torch_fl._C.__file__).name, "lib/libtorch_fl_core.so", "_build_config.py"]
    assert all((wheel_layout / "torch_fl" / f).is_file() for f in built)


def test_the_packaged_layout_imports_and_runs(python_subprocess, wheel_layout: Path) -> None:
    code = (
        # only the packaged layout: no editable-install finder serving files from the checkout
        "import sys\n"
        "sys.meta_path[:] = [\n"
        "    f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')\n"
        "]\n"
        "import torch, torch_fl, _torch_fl_autoload\n"
        "import torch_fl.comm, torch_fl.flaggems, torch_fl.tools.verify_routes\n"
        "print('FROM', torch_fl.__file__, _torch_fl_autoload.__file__)\n"
        "_torch_fl_autoload.load()\n"
        "x = torch.arange(6.0, device='flagos').view(2, 3)\n"
        "print('SUM', (x @ x.T).sum().item(), torch_fl.routing.get_route('mm'))\n"
    )
    done = python_subprocess(
        code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PYTHONPATH": None},
        path_first=wheel_layout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"FROM {wheel_layout / 'torch_fl'}" in done.stdout
    assert str(wheel_layout / AUTOLOAD_MODULE) in done.stdout
    expected = sum(a * b for i in range(2) for j in range(2) for a, b in zip(
        range(3 * i, 3 * i + 3), range(3 * j, 3 * j + 3), strict=True))  # fmt: skip
    assert f"SUM {float(expected)}" in done.stdout
