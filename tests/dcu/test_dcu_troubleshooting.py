"""The specification's DCU troubleshooting entries as real messages from real code paths
(torch_fl/vendor/dcu.py). libhydmi.so is covered in test_dcu_import.py (it needs a bundle)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dcu():
    # By path: the checks must not need the torch_fl package (and its core) imported.
    spec = importlib.util.spec_from_file_location("dcu_checks", ROOT / "torch_fl/vendor/dcu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fake_triton(tmp: Path, backends: list[str] | None) -> Path:
    pkg = tmp / "site" / "triton"
    (pkg / "backends").mkdir(parents=True)
    (pkg / "__init__.py").write_text("__version__ = '3.1.0'\n")
    if backends is not None:
        entries = ", ".join(f"{b!r}: object()" for b in backends)
        (pkg / "backends" / "__init__.py").write_text(f"backends = {{{entries}}}\n")
    return tmp / "site"


CHECK = (
    "import importlib.util, sys\n"
    f"path = {str(ROOT / 'torch_fl/vendor/dcu.py')!r}\n"
    "spec = importlib.util.spec_from_file_location('d', path)\n"
    "d = importlib.util.module_from_spec(spec); spec.loader.exec_module(d)\n"
    "try:\n"
    "    d.check_hcu_triton()\n"
    "    print('OK')\n"
    "except RuntimeError as e:\n"
    "    print('ERROR', e)\n"
)


def _run_in_repo(script: str) -> subprocess.CompletedProcess:
    """`script` in a fresh interpreter at the repository root, with this process's environment."""
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def _check_with(site: Path | None) -> str:
    env = {"PATH": "/usr/bin", "PYTHONNOUSERSITE": "1"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env)
    return result.stdout + result.stderr


def test_triton_without_hcu_names_the_flagtree_install(tmp_path: Path) -> None:
    out = _check_with(_fake_triton(tmp_path, ["nvidia", "amd"]))
    assert "ERROR Triton: No backend registered for 'hcu'" in out
    assert "registered backends: ['amd', 'nvidia']" in out
    assert 'python3 -m pip install "flagtree===0.6.2a1+hcu3.6"' in out
    assert "--index-url=https://resource.flagos.net/repository/flagos-pypi-hosted/simple" in out
    assert "python3 -m pip uninstall -y triton" in out


def test_dtk_triton_without_entry_points(tmp_path: Path) -> None:
    out = _check_with(_fake_triton(tmp_path, []))
    assert "No backend registered for 'hcu'" in out


def test_flagtree_with_hcu_passes(tmp_path: Path) -> None:
    assert "OK" in _check_with(_fake_triton(tmp_path, ["hcu"]))


def test_no_triton_at_all(tmp_path: Path) -> None:
    try:
        import triton  # noqa: F401

        pytest.skip("a triton is installed in this interpreter")
    except ImportError:
        pass
    out = _check_with(None)
    assert "ERROR FlagGems on DCU needs FlagTree's Triton" in out and "flagtree===" in out


def test_ensure_once_caches_success(monkeypatch) -> None:
    dcu = _dcu()
    calls = []
    monkeypatch.setattr(dcu, "check_hcu_triton", lambda: calls.append(1))
    dcu.ensure_hcu_triton_once()
    dcu.ensure_hcu_triton_once()
    assert calls == [1]


def test_device_count_zero_warns_with_the_checks(monkeypatch, tmp_path: Path) -> None:
    dcu = _dcu()
    kfd = tmp_path / "kfd"
    monkeypatch.setattr(dcu, "DEVICE_NODES", (str(kfd), str(tmp_path / "dri")))
    kfd.write_text("")
    kfd.chmod(0o000)
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "")
    with pytest.warns(RuntimeWarning) as record:
        assert dcu.check_device_count(lambda: 0) == 0
    message = str(record[0].message)
    assert "torch.flagos.device_count() is 0 on this dcu build" in message
    assert "DCU driver is loaded" in message
    assert "DTK's device libraries are not loaded" in message  # nothing loaded in this test
    assert f"{tmp_path / 'dri'} is missing" in message
    if not _is_root():
        assert f"{kfd} exists but is not readable" in message
    assert "--privileged" in message and "--device=/dev/kfd --device=/dev/dri" in message
    assert "HIP_VISIBLE_DEVICES='' limits the visible devices" in message


def _is_root() -> bool:
    import os

    return os.geteuid() == 0


def test_device_count_error_warns_instead_of_failing_the_import() -> None:
    dcu = _dcu()

    def no_guard() -> int:
        raise RuntimeError("PyTorch is not linked with support for cuda devices")

    with pytest.warns(RuntimeWarning, match="not linked with support for cuda") as record:
        assert dcu.check_device_count(no_guard) == 0
    assert "bash scripts/vendor/bundle_dcu_libtorch.sh" in str(record[0].message)


def test_device_count_nonzero_is_silent() -> None:
    dcu = _dcu()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dcu.check_device_count(lambda: 8) == 8


@pytest.mark.parametrize(
    ("accelerator", "world", "env", "warns"),
    [
        ("dcu", 2, {}, True),
        ("dcu", 8, {"HSA_FORCE_FINE_GRAIN_PCIE": "0"}, True),
        ("dcu", 2, {"HSA_FORCE_FINE_GRAIN_PCIE": "1"}, False),
        ("dcu", 1, {}, False),
        ("cuda", 2, {}, False),
        ("cpu", 4, {}, False),
    ],
)
def test_multicard_without_fine_grain_pcie_warns(accelerator, world, env, warns) -> None:
    dcu = _dcu()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dcu.warn_multicard_fine_grain(world, accelerator, env) is warns
    assert bool(caught) is warns
    if warns:
        text = str(caught[0].message)
        assert f"world size {world}" in text and "export HSA_FORCE_FINE_GRAIN_PCIE=1" in text


def test_multicard_reads_the_build_record(tmp_path: Path) -> None:
    """Without an explicit accelerator the build record decides (what the comm layer relies on)."""
    from tests.dcu.conftest import make_package, run_python, write_record

    package = make_package(tmp_path)
    write_record(package, boxing=False)
    result = run_python(
        "import warnings\nfrom torch_fl.vendor import dcu\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    print('WARNED', dcu.warn_multicard_fine_grain(2, env={}))\n",
        package,
    )
    assert "WARNED True" in result.stdout, result.stderr


def test_flaggems_import_on_dcu_checks_for_the_hcu_triton_first(tmp_path: Path) -> None:
    # The lazy FlagGems import of a dcu build refuses a stock Triton with the FlagTree command,
    # before touching flag_gems (a fake one here records whether it was imported).
    site = _fake_triton(tmp_path, ["nvidia", "amd"])
    (site / "flag_gems").mkdir()
    (site / "flag_gems" / "__init__.py").write_text("raise SystemExit('flag_gems was imported')\n")
    script = (
        "import sys, types\n"
        f"sys.path.insert(0, {str(site)!r})\n"
        "import torch_fl\n"
        "from torch_fl.flaggems import _import\n"
        "torch_fl.build_config.ACCELERATOR = 'dcu'  # the record of a dcu build\n"
        "try:\n"
        "    _import.load('aten::relu')\n"
        "except RuntimeError as e:\n"
        "    print('ERROR', e)\n"
    )
    proc = _run_in_repo(script)
    assert "ERROR Triton: No backend registered for 'hcu'" in proc.stdout, proc.stderr[-2000:]
    assert "flagtree===" in proc.stdout
    assert "flag_gems was imported" not in proc.stdout + proc.stderr


def test_creating_a_flagos_group_runs_the_multicard_check(tmp_path: Path) -> None:
    # The check is only as good as its call site: the flagos backend's creator passes it the
    # group's size (recorded here by a stand-in; the warning itself is tested above).
    script = (
        "import torch, torch.distributed as dist, torch_fl\n"
        "from torch_fl.vendor import dcu\n"
        "sizes = []\n"
        "dcu.warn_multicard_fine_grain = lambda n, *a, **k: sizes.append(n)\n"
        f"store = dist.FileStore({str(tmp_path / 'store')!r}, 1)\n"
        "dist.init_process_group('flagos', store=store, rank=0, world_size=1)\n"
        "t = torch.ones(3, device='flagos'); dist.all_reduce(t)\n"
        "dist.destroy_process_group()\n"
        "print('SIZES', sizes, t.cpu().tolist())\n"
    )
    proc = _run_in_repo(script)
    assert "SIZES [1] [1.0, 1.0, 1.0]" in proc.stdout, proc.stderr[-2000:]
