"""The CUDA-hooks probe (csrc/vendor/dcu/cuda_hooks_probe.cpp) that refuses a half-wired process.

torch creates its CUDA hooks once, from CUDAHooksRegistry. A stand-in "device library" that
registers hooks the way libtorch_hip.so does shows the three states on the CPU wheel:
registered before first use (ok), no registration (stub), registration after first use
(half-wired: torch_fl must refuse it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_HOOKS = r"""
#include <ATen/detail/CUDAHooksInterface.h>
namespace at {
using namespace at::detail;
namespace {
struct CUDAHooks final : at::CUDAHooksInterface {
  explicit CUDAHooks(at::CUDAHooksArgs) {}
  bool hasCUDA() const override { return true; }
};
}  // namespace
REGISTER_CUDA_HOOKS(CUDAHooks)
}  // namespace at
"""


def _compile(source: Path, out: Path) -> None:
    import torch
    import torch.utils.cpp_extension as cpp_ext

    lib = Path(torch.__file__).parent / "lib"
    cmd = [
        "g++",
        "-std=c++20",
        "-shared",
        "-fPIC",
        "-O1",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        *[f"-isystem{p}" for p in cpp_ext.include_paths()],
        str(source),
        "-o",
        str(out),
        f"-L{lib}",
        "-lc10",
        "-ltorch_cpu",
        f"-Wl,-rpath,{lib}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> tuple[Path, Path]:
    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    tmp = tmp_path_factory.mktemp("probe")
    probe = tmp / "libflagos_dcu_probe.so"
    _compile(ROOT / "csrc" / "vendor" / "dcu" / "cuda_hooks_probe.cpp", probe)
    fake_src = tmp / "fake_hooks.cpp"
    fake_src.write_text(FAKE_HOOKS)
    fake = tmp / "libfake_torch_hip.so"
    _compile(fake_src, fake)
    return probe, fake


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "PATH": "/usr/bin"},
    )


HEAD = (
    "import ctypes, sys\n"
    "from pathlib import Path\n"
    "import importlib.util\n"
    # Loaded by path: importing the torch_fl package would load its core, which may touch the
    # CUDA hooks itself and so decide the outcome before the test does.
    f"path = {str(ROOT / 'torch_fl/vendor/dcu.py')!r}\n"
    "spec = importlib.util.spec_from_file_location('dcu', path)\n"
    "dcu = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(dcu)\n"
    "probe, fake = Path(sys.argv[1]), Path(sys.argv[2])\n"
)


def _code(body: str, probe: Path, fake: Path) -> str:
    return (
        HEAD.replace("sys.argv[1]", repr(str(probe))).replace("sys.argv[2]", repr(str(fake))) + body
    )


def test_hooks_registered_before_first_use(libs) -> None:
    probe, fake = libs
    body = (
        "ctypes.CDLL(str(fake), mode=ctypes.RTLD_GLOBAL)\n"
        "import torch\n"
        "print('STATE', dcu.cuda_hooks_state(probe))\n"
    )
    result = _run(_code(body, probe, fake))
    assert "STATE 0" in result.stdout, result.stdout + result.stderr


def test_torch_import_caches_the_hooks(libs) -> None:
    """Measured on this torch: `import torch` creates the CUDA hooks, so a device library loaded
    after it (the torch-first import order) is half-wired; the check refuses that process."""
    probe, fake = libs
    body = (
        "import torch\n"
        "ctypes.CDLL(str(fake), mode=ctypes.RTLD_GLOBAL)\n"
        "print('STATE', dcu.cuda_hooks_state(probe))\n"
    )
    result = _run(_code(body, probe, fake))
    assert "STATE 1" in result.stdout, result.stdout + result.stderr


def test_no_registration_is_the_stub(libs) -> None:
    probe, fake = libs
    result = _run(_code("import torch\nprint('STATE', dcu.cuda_hooks_state(probe))\n", probe, fake))
    assert "STATE 2" in result.stdout, result.stdout + result.stderr


def test_hooks_used_before_the_library_is_half_wired_and_refused(libs) -> None:
    probe, fake = libs
    body = (
        "import torch\n"
        "dcu.cuda_hooks_state(probe)  # something touched CUDA first: torch caches the stub\n"
        "ctypes.CDLL(str(fake), mode=ctypes.RTLD_GLOBAL)\n"
        "print('STATE', dcu.cuda_hooks_state(probe))\n"
        "try:\n"
        "    dcu.check_cuda_hooks(probe)\n"
        "except ImportError as e:\n"
        "    print('ERROR', e)\n"
    )
    result = _run(_code(body, probe, fake))
    assert "STATE 1" in result.stdout, result.stdout + result.stderr
    assert "ERROR torch initialised its CUDA hooks before torch_fl loaded" in result.stdout
    assert "Import torch_fl before torch in a fresh process" in result.stdout


def test_torch_autoload_runs_after_the_hooks_are_cached(libs, tmp_path: Path) -> None:
    """Measured: a `torch.backends` entry point (how `import torch` loads torch_fl) runs after
    torch created its CUDA hooks, so only `import torch_fl` first can wire a DCU process."""
    probe, fake = libs
    site = tmp_path / "site"
    info = site / "probe_ep-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: probe-ep\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[torch.backends]\nprobe = probe_ep:run\n")
    (site / "probe_ep.py").write_text(
        "import ctypes, importlib.util\nfrom pathlib import Path\n"
        f"path = {str(ROOT / 'torch_fl/vendor/dcu.py')!r}\n"
        "spec = importlib.util.spec_from_file_location('d', path)\n"
        "dcu = importlib.util.module_from_spec(spec); spec.loader.exec_module(dcu)\n"
        "def run():\n"
        f"    ctypes.CDLL({str(fake)!r}, mode=ctypes.RTLD_GLOBAL)\n"
        f"    print('STATE_AT_AUTOLOAD', dcu.cuda_hooks_state(Path({str(probe)!r})), flush=True)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", "import torch"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin", "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"},
    )
    assert "STATE_AT_AUTOLOAD 1" in result.stdout, result.stdout + result.stderr[-2000:]
