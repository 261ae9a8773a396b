"""The dcu build's CMake logic against a fixture DTK tree: ROCM_PATH discovery, the CUDA
compatibility toolkit, MIOpen's dangling librt path, and the ABI shim built from its data file."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dcu.fixture_dtk import DANGLING_LIBRT, make_dtk_tree

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).resolve().parent / "cmake_probe"

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("g++") is None, reason="needs cmake and g++"
)


def configure(build: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    run_env = dict(os.environ if env is None else env)
    return subprocess.run(
        ["cmake", f"-S{PROBE}", f"-B{build}", f"-DTORCH_FL_ROOT={ROOT}", *args],
        capture_output=True,
        text=True,
        env=run_env,
    )


def build(build_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["cmake", "--build", str(build_dir), "-j", "1"], capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def dtk(tmp_path_factory) -> Path:
    return make_dtk_tree(tmp_path_factory.mktemp("dtk") / "opt" / "dtk")


def test_finds_the_cuda_compatibility_toolkit(dtk: Path, tmp_path: Path) -> None:
    result = configure(tmp_path / "b", f"-DROCM_PATH={dtk}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"PROBE ROCM_PATH={dtk}" in result.stdout
    assert f"PROBE CUDA_INCLUDE={dtk}/cuda/cuda-12/include" in result.stdout
    assert f"PROBE CUDART={dtk}/cuda/cuda-12/lib64/libcudart.so" in result.stdout


def test_rocm_path_from_the_environment(dtk: Path, tmp_path: Path) -> None:
    env = dict(os.environ, ROCM_PATH=str(dtk))
    result = configure(tmp_path / "b", env=env)
    assert result.returncode == 0, result.stderr
    assert f"PROBE ROCM_PATH={dtk}" in result.stdout


def test_default_rocm_path_is_opt_dtk(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ROCM_PATH"}
    result = configure(tmp_path / "b", env=env)
    if Path("/opt/dtk").is_dir():
        pytest.skip("this machine has a real /opt/dtk")
    assert result.returncode != 0
    assert "ROCM_PATH=/opt/dtk does not exist" in result.stderr
    assert "env.sh" in result.stderr


def test_missing_cuda_toolkit_is_a_clear_error(tmp_path: Path) -> None:
    dtk = make_dtk_tree(tmp_path / "dtk", cuda_dir=None, miopen=False)
    result = configure(tmp_path / "b", f"-DROCM_PATH={dtk}")
    assert result.returncode != 0
    message = " ".join(result.stderr.split())
    assert f"no CUDA compatibility toolkit under {dtk}/cuda" in message
    assert "cuda-*/include/cuda_runtime_api.h" in message


def test_newest_cuda_dir_wins(tmp_path: Path) -> None:
    dtk = make_dtk_tree(tmp_path / "dtk", miopen=False)
    shutil.copytree(dtk / "cuda" / "cuda-12", dtk / "cuda" / "cuda-11.8", symlinks=True)
    result = configure(tmp_path / "b", f"-DROCM_PATH={dtk}")
    assert result.returncode == 0, result.stderr
    assert f"PROBE CUDA_INCLUDE={dtk}/cuda/cuda-12/include" in result.stdout


def test_miopen_dangling_librt_breaks_the_link_without_the_rewrite(dtk, tmp_path) -> None:
    """The fixture reproduces the defect: linking the unrepaired config fails on this glibc."""
    if Path(DANGLING_LIBRT).exists():
        pytest.skip(f"{DANGLING_LIBRT} exists on this machine (glibc < 2.34)")
    result = configure(tmp_path / "b", f"-DROCM_PATH={dtk}", "-DPROBE_FIX_MIOPEN=OFF")
    assert result.returncode == 0, result.stderr
    assert DANGLING_LIBRT in result.stdout
    linked = build(tmp_path / "b")
    assert linked.returncode != 0
    assert "librt.so" in linked.stdout + linked.stderr


def test_miopen_librt_is_rewritten_to_lrt_and_links(dtk: Path, tmp_path: Path) -> None:
    result = configure(tmp_path / "b", f"-DROCM_PATH={dtk}")
    assert result.returncode == 0, result.stderr
    assert f"rewrote {DANGLING_LIBRT} to -lrt on MIOpen" in result.stdout
    assert "PROBE MIOPEN_LINK=-lrt;dl" in result.stdout
    linked = build(tmp_path / "b")
    assert linked.returncode == 0, linked.stdout + linked.stderr
    assert (tmp_path / "b" / "uses_miopen").exists()


SHIM_SYMBOLS = """\
# fixture list: two C++ symbols DTK-private code might reference, one C symbol
_ZN3c103hip20fixtureMissingSymbolEv
_ZN2at6native17fixture_fused_opERKNS_6TensorE   # a comment after the name
flagos_fixture_c_symbol
"""


def test_abi_shim_is_built_from_its_symbol_list(tmp_path: Path, dtk: Path) -> None:
    symbols = tmp_path / "symbols.txt"
    symbols.write_text(SHIM_SYMBOLS)
    result = configure(tmp_path / "b", f"-DROCM_PATH={dtk}", f"-DPROBE_SHIM_SYMBOLS={symbols}")
    assert result.returncode == 0, result.stderr
    built = build(tmp_path / "b")
    assert built.returncode == 0, built.stdout + built.stderr
    shim = tmp_path / "b" / "lib_dcu" / "libflagos_dcu_abi_shim.so"
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(shim)], capture_output=True, text=True, check=True
    ).stdout
    for name in (
        "_ZN3c103hip20fixtureMissingSymbolEv",
        "_ZN2at6native17fixture_fused_opERKNS_6TensorE",
        "flagos_fixture_c_symbol",
    ):
        assert f" T {name}\n" in exported, exported
    assert ctypes.CDLL(str(shim)).flagos_dcu_abi_shim_count() == 3

    # A call into a stub names the symbol and aborts rather than returning garbage.
    call = subprocess.run(
        [
            sys.executable,
            "-c",
            "import ctypes,sys; ctypes.CDLL(sys.argv[1]).flagos_fixture_c_symbol()",
            str(shim),
        ],
        capture_output=True,
        text=True,
    )
    assert call.returncode != 0
    assert "torch_fl DCU ABI shim: flagos_fixture_c_symbol was called" in call.stderr


def test_the_shipped_symbol_list_parses(tmp_path: Path) -> None:
    gen = ROOT / "scripts" / "vendor" / "gen_dcu_abi_shim.py"
    out = tmp_path / "shim.cpp"
    subprocess.run(
        [sys.executable, str(gen), str(ROOT / "csrc/vendor/dcu/abi_shim_symbols.txt"), str(out)],
        check=True,
    )
    assert "flagos_dcu_abi_shim_count" in out.read_text()


def test_bad_symbol_list_names_file_and_line(tmp_path: Path) -> None:
    gen = ROOT / "scripts" / "vendor" / "gen_dcu_abi_shim.py"
    bad = tmp_path / "bad.txt"
    bad.write_text("ok_symbol\nnot a symbol\n")
    result = subprocess.run(
        [sys.executable, str(gen), str(bad), str(tmp_path / "o.cpp")],
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert f"{bad}:2: not a symbol name" in result.stderr


def test_missing_symbol_attribution(tmp_path: Path) -> None:
    """scripts/vendor/dcu_missing_symbols.py: the measurement that fills the shim's list."""
    import torch

    src = tmp_path / "hip.cpp"
    src.write_text(
        "namespace c10 { namespace hip { void dtkOnly(); } void intrusive_ptr_dummy(); }\n"
        "void unrelated_runtime_fn();\n"
        'extern "C" void use() { c10::hip::dtkOnly(); unrelated_runtime_fn(); }\n'
    )
    bundle = tmp_path / "lib_dcu"
    bundle.mkdir()
    subprocess.run(
        ["g++", "-shared", "-fPIC", str(src), "-o", str(bundle / "libtorch_hip.so")], check=True
    )
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/vendor/dcu_missing_symbols.py"),
            str(bundle),
            str(Path(torch.__file__).parent / "lib"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.splitlines() == ["_ZN3c103hip7dtkOnlyEv  # c10::hip::dtkOnly()"]
    # Its output is the data file's format: the generator accepts it as is.
    listed = tmp_path / "symbols.txt"
    listed.write_text(result.stdout)
    gen = ROOT / "scripts" / "vendor" / "gen_dcu_abi_shim.py"
    subprocess.run([sys.executable, str(gen), str(listed), str(tmp_path / "s.cpp")], check=True)
    assert '__asm__("_ZN3c103hip7dtkOnlyEv")' in (tmp_path / "s.cpp").read_text()
    # A directory without the device libraries is an error, not an empty (successful) list.
    empty = subprocess.run(
        [sys.executable, str(ROOT / "scripts/vendor/dcu_missing_symbols.py"), str(tmp_path / "no")],
        capture_output=True,
        text=True,
    )
    assert empty.returncode == 2 and "has none of" in empty.stderr and empty.stdout == ""
