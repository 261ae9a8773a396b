"""The real project configured for FLAGOS_ACCELERATOR=dcu against a fixture DTK tree, with the
arguments setup.py passes: the cuda accelerator's runtime sources compile with plain host g++
against $ROCM_PATH/cuda/cuda-*/include, and the ABI shim and the hooks probe build."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.dcu.fixture_dtk import HOST_CUDA_INCLUDE, make_dtk_tree

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None
    or shutil.which("ninja") is None
    or not (HOST_CUDA_INCLUDE / "cuda_runtime_api.h").exists(),
    reason="needs cmake, ninja and CUDA runtime headers to stand in for DTK's compatibility ones",
)


def _cmake_args(build: Path, package: Path, dtk: Path, *extra: str) -> list[str]:
    import torch
    import torch.utils.cpp_extension as cpp_ext

    major, minor = torch.__version__.split(".")[:2]
    return [
        "cmake",
        f"-S{ROOT}",
        f"-B{build}",
        "-GNinja",
        "-DCMAKE_BUILD_TYPE=Release",
        "-DFLAGOS_ACCELERATOR=dcu",
        "-DFLAGOS_BUILD_BOXING=ON",
        f"-DFLAGOS_PACKAGE_DIR={package}",
        "-DFLAGOS_EXT_NAME=_C.so",
        f"-DFLAGOS_TORCH_INCLUDE_DIRS={';'.join(cpp_ext.include_paths())}",
        f"-DFLAGOS_TORCH_LIBRARY_DIR={cpp_ext.library_paths()[0]}",
        f"-DFLAGOS_TORCH_MAJOR={major}",
        f"-DFLAGOS_TORCH_MINOR={minor}",
        f"-DFLAGOS_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-DPython_INCLUDE_DIR={sysconfig.get_paths()['include']}",
        f"-DROCM_PATH={dtk}",
        *extra,
    ]


@pytest.fixture(scope="module")
def configured(tmp_path_factory) -> tuple[Path, Path, Path, str]:
    tmp = tmp_path_factory.mktemp("dcu_project")
    dtk = make_dtk_tree(tmp / "dtk")
    build, package = tmp / "build", tmp / "torch_fl"
    result = subprocess.run(
        _cmake_args(build, package, dtk, "-DFLAGOS_BUILD_VENDOR=ON"), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return build, package, dtk, result.stdout


def test_configure_reports_the_toolkit_and_the_fixes(configured) -> None:
    _, _, dtk, out = configured
    assert f"torch_fl dcu: ROCM_PATH={dtk}" in out
    assert f"CUDA compatibility toolkit {dtk}/cuda/cuda-12" in out
    assert "rewrote /usr/lib/x86_64-linux-gnu/librt.so to -lrt on MIOpen" in out
    assert "FLAGOS_BUILD_VENDOR has no DCU backend directory; ignored" in out
    assert "torch_fl dcu: NCCL bridge not built: no DTK torch headers found" in out


def test_runtime_sources_compile_with_host_gxx_against_dtk_headers(configured) -> None:
    build, _, dtk, _ = configured
    commands = subprocess.run(
        ["ninja", "-C", str(build), "-t", "commands", "torch_fl_core"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cuda_compiles = [c for c in commands.splitlines() if "csrc/runtime/cuda/" in c and " -c " in c]
    assert len(cuda_compiles) == len(list((ROOT / "csrc/runtime/cuda").glob("*.cpp")))
    for command in cuda_compiles:
        assert f"-isystem {dtk}/cuda/cuda-12/include" in command
        assert "nvcc" not in command and "hipcc" not in command
    objects = [
        f"CMakeFiles/torch_fl_core.dir/csrc/runtime/cuda/{src.name}.o"
        for src in sorted((ROOT / "csrc/runtime/cuda").glob("*.cpp"))
    ]
    result = subprocess.run(
        ["ninja", "-C", str(build), "-j1", *objects], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout[-4000:]
    link = [c for c in commands.splitlines() if "libtorch_fl_core.so" in c and " -o " in c]
    assert link and f"{dtk}/cuda/cuda-12/lib64/libcudart.so" in link[0]
    assert "torch_cuda" not in link[0] and "c10_cuda" not in link[0]


def test_shim_and_probe_build(configured) -> None:
    build, package, _, _ = configured
    result = subprocess.run(
        ["ninja", "-C", str(build), "-j1", "flagos_dcu_abi_shim", "flagos_dcu_probe"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert (package / "lib_dcu" / "libflagos_dcu_abi_shim.so").exists()
    assert (package / "lib" / "libflagos_dcu_probe.so").exists()


def test_legacy_layout_builds_no_shim(tmp_path: Path) -> None:
    dtk = make_dtk_tree(tmp_path / "dtk", miopen=False)
    result = subprocess.run(
        _cmake_args(tmp_path / "b", tmp_path / "pkg", dtk, "-DFLAGOS_DCU_VENDOR_CORE=ON"),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    targets = subprocess.run(
        ["ninja", "-C", str(tmp_path / "b"), "-t", "targets", "all"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "flagos_dcu_abi_shim" not in targets
    assert "no MIOpen CMake config" in result.stdout


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("FLAGOS_DCU_FULL_BUILD") != "1",
    reason="the whole dcu project takes ~10 min on one core; set FLAGOS_DCU_FULL_BUILD=1",
)
def test_whole_project_builds_and_links_for_dcu(configured) -> None:
    build, package, dtk, _ = configured
    result = subprocess.run(["ninja", "-C", str(build), "-j1"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:]
    core = package / "lib" / "libtorch_fl_core.so"
    dynamic = subprocess.run(
        ["readelf", "-d", str(core)], capture_output=True, text=True, check=True
    ).stdout
    assert "[libcudart.so.12]" in dynamic  # DTK's compatibility runtime
    assert "torch_cuda" not in dynamic and "c10_cuda" not in dynamic
    assert "$ORIGIN/../lib_dcu" in dynamic and f"{dtk}/cuda/cuda-12/lib64" in dynamic


def test_nccl_bridge_compiles_against_dtk_torch_headers_first(tmp_path: Path) -> None:
    # Stand-ins: DTK torch's headers (only the file that marks them), RCCL's and hipSPARSE's.
    # The bridge cannot compile against them; what is checked is how it would be compiled.
    dtk = make_dtk_tree(tmp_path / "dtk")
    dtk_torch_include = dtk / "lib" / "python3" / "site-packages" / "torch" / "include"
    for header in (
        dtk_torch_include / "torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp",
        dtk / "include/rccl/rccl.h",
        dtk / "include/hipsparse/hipsparse.h",
    ):
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text("/* fixture stub */\n")
    build, package = tmp_path / "build", tmp_path / "torch_fl"
    result = subprocess.run(_cmake_args(build, package, dtk), capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"NCCL bridge against DTK torch headers {dtk_torch_include}" in result.stdout
    assert "torch_fl: NCCL bridge _flagos_nccl.so" in result.stdout

    commands = subprocess.run(
        ["ninja", "-C", str(build), "-t", "commands", "flagos_nccl_bridge"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    compile_line = next(c for c in commands if "flagos_nccl.cpp" in c)
    for define in ("-DUSE_C10D_NCCL=1", "-DUSE_ROCM=1", "-D__HIP_PLATFORM_AMD__=1"):
        assert define in compile_line
    import torch.utils.cpp_extension as cpp_ext

    official = f"-isystem {cpp_ext.include_paths()[0]}"
    dtk_first = f"-isystem {dtk_torch_include}"
    assert dtk_first in compile_line and official in compile_line
    assert compile_line.index(dtk_first) < compile_line.index(official)
    link_line = commands[-1]
    assert str(package / "comm" / "_nccl_ext" / "_flagos_nccl.so") in link_line
    assert "torch_cuda" not in link_line and "nvcc" not in compile_line
