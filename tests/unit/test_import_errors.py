"""Import-time failures are clear errors, each checked in a fresh interpreter.

A bad FLAGOS_CPU_DEVICE_COUNT, a build record of another torch version, a missing build record,
and PrivateUse1 owned by another plugin must each stop `import torch_fl` with a message that
says what is wrong and how to fix it.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

import torch_fl

NO_AUTOLOAD = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
REBUILD = "pip install --no-build-isolation -e ."
ON_CPU_ACCELERATOR = torch_fl.build_config.ACCELERATOR == "cpu"

PRINT_COUNT = "import torch, torch_fl; print('COUNT', torch.flagos.device_count())"


@pytest.mark.skipif(
    not ON_CPU_ACCELERATOR, reason="FLAGOS_CPU_DEVICE_COUNT is the cpu accelerator's"
)
@pytest.mark.parametrize("value", ["0", "65", "3x", " 3", "+3", "3 ", "-1", "99999999999999999999"])
def test_invalid_cpu_device_count_fails_import(python_subprocess, value: str) -> None:
    done = python_subprocess(PRINT_COUNT, env={**NO_AUTOLOAD, "FLAGOS_CPU_DEVICE_COUNT": value})
    assert done.returncode != 0, done.stdout
    assert "COUNT" not in done.stdout
    assert "RuntimeError" in done.stderr
    assert f"FLAGOS_CPU_DEVICE_COUNT={value} is invalid" in done.stderr
    assert "1 to 64" in done.stderr  # says what is valid


@pytest.mark.skipif(
    not ON_CPU_ACCELERATOR, reason="FLAGOS_CPU_DEVICE_COUNT is the cpu accelerator's"
)
def test_valid_cpu_device_count_is_honoured(python_subprocess) -> None:
    code = (
        "import torch, torch_fl; print('COUNT', torch.flagos.device_count());"
        "t = torch.ones(1, device='flagos:2'); print('DEV', t.device)"
    )
    done = python_subprocess(code, env={**NO_AUTOLOAD, "FLAGOS_CPU_DEVICE_COUNT": "3"})
    assert done.returncode == 0, done.stderr
    assert "COUNT 3" in done.stdout and "DEV flagos:2" in done.stdout


@pytest.mark.skipif(
    not ON_CPU_ACCELERATOR, reason="FLAGOS_CPU_DEVICE_COUNT is the cpu accelerator's"
)
def test_invalid_cpu_device_count_with_autoload(python_subprocess) -> None:
    done = python_subprocess(
        "import torch", env={"FLAGOS_CPU_DEVICE_COUNT": "0", "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    )
    assert done.returncode != 0
    assert "FLAGOS_CPU_DEVICE_COUNT=0 is invalid" in done.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in done.stderr  # torch says how to opt out


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of the built torch_fl package in a directory of its own."""
    source = Path(torch_fl.__file__).parent
    shutil.copytree(source, tmp_path / "torch_fl", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _set_record_version(root: Path, version: str) -> None:
    record = root / "torch_fl" / "_build_config.py"
    text, count = re.subn(
        r"^TORCH_VERSION = .*$", f"TORCH_VERSION = {version!r}", record.read_text(), flags=re.M
    )
    assert count == 1
    record.write_text(text)


def _other_minor() -> str:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return f"{major}.{int(minor) + 1}.0"


def test_version_mismatch_names_both_versions_and_rebuild(
    python_subprocess, package_copy: Path
) -> None:
    recorded = _other_minor()
    _set_record_version(package_copy, recorded)
    code = (
        "import torch\n"
        "try:\n"
        "    import torch_fl\n"
        "except ImportError as e:\n"
        "    print('ERROR', e)\n"
        "print('NAME', torch._C._get_privateuse1_backend_name(), hasattr(torch, 'flagos'))\n"
    )
    done = python_subprocess(code, env=NO_AUTOLOAD, path_first=package_copy)
    assert done.returncode == 0, done.stderr
    error = next(line for line in done.stdout.splitlines() if line.startswith("ERROR"))
    assert recorded in error
    assert torch.__version__ in error
    assert REBUILD in error
    # refused before the C++ core loaded: torch is left without a flagos device
    assert "NAME privateuseone False" in done.stdout


def test_version_mismatch_through_autoload_warns_and_torch_works(
    python_subprocess, package_copy: Path
) -> None:
    # `import torch` must not break for every program in the environment: it warns, starts
    # without the device, and an explicit `import torch_fl` raises the full error.
    recorded = _other_minor()
    _set_record_version(package_copy, recorded)
    code = (
        "import torch\n"
        "print('TORCH', torch.ones(2).sum().item(), hasattr(torch, 'flagos'),"
        " torch._C._get_privateuse1_backend_name())\n"
        "try:\n"
        "    import torch_fl\n"
        "except ImportError as e:\n"
        "    print('ERROR', e)\n"
    )
    done = python_subprocess(
        code, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}, path_first=package_copy
    )
    assert done.returncode == 0, done.stderr
    assert "TORCH 2.0 False privateuseone" in done.stdout  # nothing was half-registered
    assert "RuntimeWarning: torch_fl is installed but cannot be imported" in done.stderr
    assert recorded in done.stderr and REBUILD in done.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in done.stderr
    error = next(line for line in done.stdout.splitlines() if line.startswith("ERROR"))
    assert recorded in error and torch.__version__ in error and REBUILD in error


def test_a_failure_after_registration_still_stops_import_torch(
    python_subprocess, package_copy: Path
) -> None:
    # The core is loaded and PrivateUse1 renamed when this import fails: going on with a
    # warning would leave a half-wired process, so autoload keeps torch's error.
    (package_copy / "torch_fl" / "flaggems" / "__init__.py").write_text(
        "raise ImportError('flaggems broken for the test')\n"
    )
    done = python_subprocess(
        "import torch", env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}, path_first=package_copy
    )
    assert done.returncode != 0
    assert "flaggems broken for the test" in done.stderr
    assert "Failed to load the backend extension: flagos" in done.stderr
    assert "RuntimeWarning" not in done.stderr


def test_copy_with_same_minor_other_patch_imports(python_subprocess, package_copy: Path) -> None:
    # Also the control for the doctored copies: the copy itself loads and works.
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    _set_record_version(package_copy, f"{major}.{minor}.99")
    code = (
        "import torch, torch_fl; print('FILE', torch_fl.__file__);"
        "print(torch.ones(1, device='flagos').device)"
    )
    done = python_subprocess(code, env=NO_AUTOLOAD, path_first=package_copy)
    assert done.returncode == 0, done.stderr
    assert f"FILE {package_copy}" in done.stdout
    assert "flagos:0" in done.stdout


# An editable install's meta-path finder would serve a missing module from the installed tree.
ONLY_SYS_PATH = (
    "import sys\n"
    "sys.meta_path[:] = [\n"
    "    f for f in sys.meta_path if '__editable__' not in getattr(f, '__module__', '')\n"
    "]\n"
)


def test_missing_build_record(python_subprocess, package_copy: Path) -> None:
    (package_copy / "torch_fl" / "_build_config.py").unlink()
    code = ONLY_SYS_PATH + "import torch, torch_fl"
    done = python_subprocess(code, env=NO_AUTOLOAD, path_first=package_copy)
    assert done.returncode != 0
    assert "ImportError" in done.stderr
    assert "has not been built" in done.stderr and REBUILD in done.stderr


def test_privateuse1_owned_by_another_plugin(python_subprocess) -> None:
    code = (
        "import torch\n"
        "torch.utils.rename_privateuse1_backend('otherdev')\n"
        "try:\n"
        "    import torch_fl\n"
        "except RuntimeError as e:\n"
        "    print('ERROR', e)\n"
        "print('NAME', torch._C._get_privateuse1_backend_name(), hasattr(torch, 'flagos'))\n"
    )
    done = python_subprocess(code, env=NO_AUTOLOAD)
    assert done.returncode == 0, done.stderr
    assert "ERROR PrivateUse1 is already registered as 'otherdev'" in done.stdout
    assert "another device plugin" in done.stdout
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in done.stdout  # says how to choose one plugin
    assert "NAME otherdev False" in done.stdout  # the other plugin keeps its name


def test_importing_twice_is_harmless(python_subprocess) -> None:
    code = (
        "import importlib, torch, torch_fl\n"
        "importlib.reload(torch_fl)\n"
        "import torch_fl as again\n"
        "print('SAME', torch.flagos is again.flagos, torch.flagos.device_count() > 0)\n"
        "print(torch.ones(2, device='flagos').sum().item())\n"
    )
    done = python_subprocess(code, env=NO_AUTOLOAD)
    assert done.returncode == 0, done.stderr
    assert "SAME True True" in done.stdout and "2.0" in done.stdout
