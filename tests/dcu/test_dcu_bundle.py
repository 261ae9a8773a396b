"""scripts/vendor/bundle_dcu_libtorch.sh against a fixture DTK tree."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.dcu.conftest import SHIM, run_bundle, stage_shim, write_record
from tests.dcu.fixture_dtk import make_dtk_tree, torch_lib_dir

pytestmark = pytest.mark.skipif(
    shutil.which("patchelf") is None or shutil.which("gcc") is None, reason="needs patchelf, gcc"
)


def _runpath(lib: Path) -> str:
    return subprocess.run(
        ["patchelf", "--print-rpath", str(lib)], capture_output=True, text=True, check=True
    ).stdout.strip()


def _torch_lib_snapshot() -> list[tuple[str, int, int]]:
    import torch

    lib = Path(torch.__file__).parent / "lib"
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in lib.iterdir())


def test_default_layout(tmp_path: Path, dtk: Path) -> None:
    package = tmp_path / "torch_fl"
    package.mkdir()
    write_record(package)
    stage_shim(package)
    before = _torch_lib_snapshot()
    result = run_bundle(package, dtk)
    assert result.returncode == 0, result.stderr
    bundle = package / "lib_dcu"
    manifest = json.loads((bundle / "bundle.json").read_text())
    assert manifest["mode"] == "abi-shim"
    assert manifest["load_order"] == [SHIM, "libc10_hip.so", "libmagma.so", "libtorch_hip.so"]
    assert manifest["torch_version"].startswith(".".join(_torch_lib_version()[:2]))
    assert manifest["source"] == str(torch_lib_dir(dtk))  # discovered under ROCM_PATH
    names = {f["name"] for f in manifest["files"]}
    assert names == set(manifest["load_order"])
    for name in ("libc10_hip.so", "libmagma.so", "libtorch_hip.so"):
        assert _runpath(bundle / name).startswith("$ORIGIN")
        assert len(next(f["sha256"] for f in manifest["files"] if f["name"] == name)) == 64
    assert _torch_lib_snapshot() == before  # the torch installation is not modified


def _torch_lib_version() -> list[str]:
    import torch

    return torch.__version__.split("+")[0].split(".")


def test_legacy_full_core_layout(tmp_path: Path, dtk: Path) -> None:
    package = tmp_path / "torch_fl"
    package.mkdir()
    write_record(package, vendor_core=True)
    stage_shim(package)  # left over from an earlier default build: must not survive
    result = run_bundle(package, dtk, FLAGOS_DCU_VENDOR_CORE="1")
    assert result.returncode == 0, result.stderr
    manifest = json.loads((package / "lib_dcu" / "bundle.json").read_text())
    assert manifest["mode"] == "vendor-core"
    assert manifest["load_order"][0] == "libc10.so"
    assert {"libtorch_cpu.so", "libtorch_python.so", "libtorch_hip.so"} <= set(
        manifest["load_order"]
    )
    assert not (package / "lib_dcu" / SHIM).exists()


def test_layout_must_match_the_build(tmp_path: Path, dtk: Path) -> None:
    package = tmp_path / "torch_fl"
    package.mkdir()
    write_record(package, vendor_core=False)
    stage_shim(package)
    result = run_bundle(package, dtk, FLAGOS_DCU_VENDOR_CORE="1")
    assert result.returncode != 0
    assert "built for the 'abi-shim' layout but this run stages 'vendor-core'" in result.stderr


def test_needs_the_shim_from_build_ext(tmp_path: Path, dtk: Path) -> None:
    package = tmp_path / "torch_fl"
    package.mkdir()
    write_record(package)
    result = run_bundle(package, dtk)
    assert result.returncode != 0
    assert "FLAGOS_ACCELERATOR=dcu python setup.py build_ext --inplace first" in result.stderr


def test_needs_a_dcu_build(tmp_path: Path, dtk: Path) -> None:
    package = tmp_path / "torch_fl"
    package.mkdir()
    (package / "_build_config.py").write_text("ACCELERATOR = 'cpu'\n")
    result = run_bundle(package, dtk)
    assert result.returncode != 0
    assert "rebuild with FLAGOS_ACCELERATOR=dcu" in result.stderr


def test_minor_version_mismatch_is_refused(tmp_path: Path) -> None:
    dtk = make_dtk_tree(tmp_path / "dtk", torch_version="2.10.0+das.opt1.dtk25041")
    package = tmp_path / "torch_fl"
    package.mkdir()
    write_record(package, torch="2.13.0+cpu")
    stage_shim(package)
    result = run_bundle(package, dtk)
    assert result.returncode != 0
    assert "DTK torch 2.10.0+das.opt1.dtk25041 does not match the torch 2.13.0" in result.stderr
    assert "install torch 2.10" in result.stderr
    assert not (package / "lib_dcu" / "bundle.json").exists()


def test_from_a_dtk_torch_wheel(tmp_path: Path, dtk: Path) -> None:
    wheel = tmp_path / "torch-dtk-cp311-linux_x86_64.whl"
    torch_dir = torch_lib_dir(dtk).parent
    with zipfile.ZipFile(wheel, "w") as zf:
        for path in torch_dir.rglob("*"):
            zf.write(path, Path("torch") / path.relative_to(torch_dir))
    shutil.copy2(dtk / "lib" / "libmagma.so", torch_dir / "lib" / "libmagma.so")
    shutil.rmtree(torch_dir)
    package = tmp_path / "torch_fl"
    package.mkdir()
    write_record(package)
    stage_shim(package)
    result = run_bundle(package, dtk, DCU_TORCH_WHEEL=str(wheel))
    assert result.returncode == 0, result.stderr
    assert (package / "lib_dcu" / "libtorch_hip.so").exists()


def test_missing_dtk_torch_says_what_to_set(tmp_path: Path, dtk: Path) -> None:
    shutil.rmtree(torch_lib_dir(dtk).parent)
    package = tmp_path / "torch_fl"
    package.mkdir()
    write_record(package)
    stage_shim(package)
    result = run_bundle(package, dtk)
    assert result.returncode != 0
    assert "set DCU_TORCH_LIB_DIR" in result.stderr


def test_shell_syntax() -> None:
    from tests.dcu.conftest import BUNDLE_SCRIPT

    subprocess.run(["bash", "-n", str(BUNDLE_SCRIPT)], check=True)
    if shutil.which("shellcheck"):
        result = subprocess.run(["shellcheck", str(BUNDLE_SCRIPT)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout
