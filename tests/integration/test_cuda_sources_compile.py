"""The cuda accelerator's sources compile on a machine without a GPU (CI): they use only
device-generic torch headers and the CUDA runtime API, so torch's CPU wheel headers plus the
CUDA toolkit's (or DTK's compatibility) headers are enough."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
from pathlib import Path

import pytest
import torch.utils.cpp_extension as cpp_ext

ROOT = Path(__file__).resolve().parents[2]
CUDA_INCLUDE = Path("/usr/local/cuda/include")
SOURCES = sorted((ROOT / "csrc" / "runtime" / "cuda").glob("*.cpp"))


@pytest.mark.skipif(
    not (CUDA_INCLUDE / "cuda_runtime_api.h").exists() or shutil.which("g++") is None,
    reason="needs g++ and CUDA runtime headers in /usr/local/cuda/include",
)
@pytest.mark.parametrize("source", SOURCES, ids=[s.name for s in SOURCES])
def test_cuda_accelerator_source_compiles(source: Path) -> None:
    import torch

    flags = [
        "g++",
        "-std=c++20",
        "-fsyntax-only",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        '-DFLAGOS_ACCELERATOR_NAME="cuda"',
        "-DFLAGOS_BUILD_BOXING=1",
        f"-I{ROOT / 'csrc'}",
        f"-isystem{CUDA_INCLUDE}",
        f"-isystem{sysconfig.get_paths()['include']}",
    ]
    flags += [f"-isystem{p}" for p in cpp_ext.include_paths()]
    result = subprocess.run([*flags, str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-4000:]
