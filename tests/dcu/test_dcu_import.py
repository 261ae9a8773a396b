"""Import-time behaviour of a dcu build against fixture bundles, each in a fresh interpreter on a
copy of the package with a doctored build record (torch_fl/vendor/dcu.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.dcu.conftest import ROOT, make_package, run_bundle, run_python, stage_shim, write_record
from tests.dcu.fixture_dtk import make_dtk_tree

pytestmark = pytest.mark.skipif(
    shutil.which("patchelf") is None or shutil.which("gcc") is None, reason="needs patchelf, gcc"
)

PRELUDE = (
    "import sys\n"
    "import torch_fl.vendor as v\n"
    "try:\n"
    "    v.prelude()\n"
    "except ImportError as e:\n"
    "    print('ERROR', type(e).__name__, e)\n"
    "print('TORCH_IMPORTED', 'torch' in sys.modules)\n"
)


def _bundle(tmp: Path, dtk: Path, *, vendor_core: bool = False, full: bool = False) -> Path:
    package = make_package(tmp, full=full)
    write_record(package, vendor_core=vendor_core, rocm=str(dtk))
    if not vendor_core:
        stage_shim(package)
    env = {"FLAGOS_DCU_VENDOR_CORE": "1"} if vendor_core else {}
    result = run_bundle(package, dtk, **env)
    assert result.returncode == 0, result.stderr
    return package


def _log(tmp: Path) -> tuple[Path, dict]:
    log = tmp / "load.log"
    return log, {"FLAGOS_FIXTURE_LOAD_LOG": str(log)}


def _loaded(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def _doctor(package: Path, **changes) -> None:
    path = package / "lib_dcu" / "bundle.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    path.write_text(json.dumps(manifest))


def test_default_layout_loads_in_order_before_torch(tmp_path: Path, dtk: Path) -> None:
    package = _bundle(tmp_path, dtk)
    log, env = _log(tmp_path)
    result = run_python(PRELUDE + "import torch; print('OK', torch.__version__)", package, **env)
    assert "ERROR" not in result.stdout, result.stdout + result.stderr
    assert "TORCH_IMPORTED False" in result.stdout  # loaded before torch, without importing it
    assert _loaded(log) == [
        "libflagos_dcu_abi_shim.so",
        "libc10_hip.so",
        "libmagma.so",
        "libtorch_hip.so",
    ]
    assert "OK " in result.stdout, result.stderr


def test_minor_mismatch_is_refused_before_anything_loads(tmp_path: Path, dtk: Path) -> None:
    package = _bundle(tmp_path, dtk)
    _doctor(package, torch_version="2.10.0+das.opt1.dtk25041")
    log, env = _log(tmp_path)
    result = run_python(PRELUDE, package, **env)
    assert "ERROR DcuBundleError" in result.stdout, result.stderr
    assert "needs the installed torch to be 2.10.x" in result.stdout
    assert "pip install 'torch==2.10.*'" in result.stdout
    assert _loaded(log) == []
    assert "TORCH_IMPORTED False" in result.stdout


def test_vendor_core_checks_three_part_version(tmp_path: Path, dtk: Path) -> None:
    package = _bundle(tmp_path, dtk, vendor_core=True)
    import torch

    major, minor, patch = torch.__version__.split("+")[0].split(".")[:3]
    _doctor(package, torch_version=f"{major}.{minor}.{int(patch) + 1}")
    log, env = _log(tmp_path)
    result = run_python(PRELUDE, package, **env)
    assert f"needs the installed torch to be {major}.{minor}.{int(patch) + 1} " in result.stdout
    assert "three-part version" in result.stdout
    assert _loaded(log) == []


def test_vendor_core_loads_the_full_core_set(tmp_path: Path, dtk: Path) -> None:
    package = _bundle(tmp_path, dtk, vendor_core=True)
    log, env = _log(tmp_path)
    result = run_python(PRELUDE, package, **env)
    assert "ERROR" not in result.stdout, result.stdout + result.stderr
    assert _loaded(log)[0] == "libc10.so" and "libtorch_python.so" in _loaded(log)


def test_vendor_core_after_torch_fails_clearly(tmp_path: Path, dtk: Path) -> None:
    package = _bundle(tmp_path, dtk, vendor_core=True)
    log, env = _log(tmp_path)
    result = run_python("import torch\n" + PRELUDE, package, **env)
    assert "ERROR DcuBundleError" in result.stdout
    assert "Import torch_fl before torch in a fresh process" in result.stdout
    assert _loaded(log) == []  # nothing half-loaded


@pytest.mark.parametrize(
    ("record_core", "bundle_core"),
    [(True, False), (False, True)],
    ids=["core-vs-shim", "shim-vs-core"],
)
def test_mode_mismatch_fails_at_import(tmp_path, dtk, record_core, bundle_core) -> None:
    package = _bundle(tmp_path, dtk, vendor_core=bundle_core)
    write_record(package, vendor_core=record_core, rocm=str(dtk))
    log, env = _log(tmp_path)
    result = run_python(PRELUDE, package, **env)
    assert "ERROR DcuBundleError" in result.stdout
    assert "layouts are not interchangeable" in result.stdout
    assert _loaded(log) == []


def test_tampered_bundle_fails_at_import(tmp_path: Path, dtk: Path) -> None:
    package = _bundle(tmp_path, dtk)
    with (package / "lib_dcu" / "libmagma.so").open("ab") as handle:
        handle.write(b"\0")
    result = run_python(PRELUDE, package)
    assert "libmagma.so has" in result.stdout and "Re-run bash scripts/vendor" in result.stdout
    verify = run_python(
        "import sys; from torch_fl.vendor import dcu; sys.exit(dcu.main(['x', '--verify']))",
        package,
    )
    assert verify.returncode == 1 and "libmagma.so: sha256 differs" in verify.stdout


def test_boxing_build_without_bundle_says_how_to_stage(tmp_path: Path, dtk: Path) -> None:
    package = make_package(tmp_path)
    write_record(package, rocm=str(dtk))
    result = run_python(PRELUDE, package)
    assert "ERROR DcuBundleError" in result.stdout
    assert f"ROCM_PATH={dtk} bash scripts/vendor/bundle_dcu_libtorch.sh" in result.stdout


def test_default_build_needs_no_bundle(tmp_path: Path, dtk: Path) -> None:
    package = make_package(tmp_path)
    write_record(package, boxing=False, rocm=str(dtk))
    result = run_python(PRELUDE, package)
    assert "ERROR" not in result.stdout, result.stdout + result.stderr


def test_missing_libhydmi_names_the_hyhal_directory(tmp_path: Path) -> None:
    from tests.dcu.conftest import installed_torch_version

    dtk = make_dtk_tree(
        tmp_path / "dtk",
        torch_version=installed_torch_version(),
        cuda_dir=None,
        miopen=False,
        hydmi_dependency=True,
    )
    package = _bundle(tmp_path, dtk)
    result = run_python(PRELUDE, package, LD_LIBRARY_PATH="")
    assert "ERROR DcuBundleError cannot load libtorch_hip.so: libhydmi.so" in result.stdout
    assert "export LD_LIBRARY_PATH=/usr/local/hyhal/lib:$LD_LIBRARY_PATH" in result.stdout
    assert "/opt/hyhal/lib" in result.stdout


def _built() -> bool:
    return any((ROOT / "torch_fl").glob("_C*.so")) and (ROOT / "torch_fl" / "lib").is_dir()


@pytest.mark.skipif(not _built(), reason="needs torch_fl built in this tree (any accelerator)")
def test_import_torch_fl_runs_the_dcu_checks_first(tmp_path: Path, dtk: Path) -> None:
    """`import torch_fl` on a doctored dcu record: the bundle is checked before torch loads."""
    package = _bundle(tmp_path, dtk, full=True)
    _doctor(package, torch_version="2.9.1")
    result = run_python(
        "import sys\ntry:\n    import torch_fl\nexcept ImportError as e:\n    print('ERROR', e)\n"
        "print('TORCH_IMPORTED', 'torch' in sys.modules)",
        package,
    )
    assert "ERROR torch_fl's DCU bundle" in result.stdout, result.stdout + result.stderr
    assert "needs the installed torch to be 2.9.x" in result.stdout
    assert "TORCH_IMPORTED False" in result.stdout


@pytest.mark.skipif(not _built(), reason="needs torch_fl built in this tree (any accelerator)")
@pytest.mark.parametrize("torch_first", [False, True], ids=["torch_fl-first", "torch-first"])
def test_import_torch_fl_with_a_good_bundle(tmp_path: Path, dtk: Path, torch_first) -> None:
    package = _bundle(tmp_path, dtk, full=True)
    log, env = _log(tmp_path)
    code = ("import torch\n" if torch_first else "") + (
        "import torch_fl, torch\nprint('DEVICE', torch.flagos.device_count())\n"
        "print('HIP', torch.version.hip)\n"
    )
    # The core here is a cpu build under a doctored dcu record: route with the cpu table.
    env["FLAGOS_BACKEND_CONFIG"] = str(package / "configs" / "backends_cpu.conf")
    result = run_python(code, package, **env)
    assert "DEVICE" in result.stdout, result.stdout + result.stderr
    assert _loaded(log)[-1] == "libtorch_hip.so"
    assert "HIP 6.3.25041" in result.stdout  # the fixture DTK torch's torch.version.hip
