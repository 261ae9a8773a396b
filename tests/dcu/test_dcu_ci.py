"""The DCU CI manifest lists the specification's test groups; set_env_dcu.sh prepares the
environment it describes (checked here in dry-run mode against a fixture DTK tree)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.dcu.fixture_dtk import build_standin, make_dtk_tree

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / ".github" / "configs" / "dcu.yml"
SET_ENV = ROOT / ".github" / "scripts" / "set_env_dcu.sh"


@pytest.fixture(scope="module")
def manifest() -> dict:
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load(MANIFEST.read_text())


def _groups(manifest: dict) -> dict[str, dict]:
    return {g["name"]: g for g in manifest["stages"]["test"]["groups"]}


def test_the_specification_groups_are_listed(manifest: dict) -> None:
    groups = _groups(manifest)
    expected = {
        "Vendor backend operators": [
            "pytest tests/integration/test_allocator.py tests/integration/test_factory_ops.py -q",
            'pytest tests/integration/ops/ -m "main_ops and not flaggems and not flaggems_python"'
            " -v --tb=short",
        ],
        "FlagGems runtime operators": [
            'pytest tests/integration/ops/ -m "flaggems and main_ops" -v --tb=short'
        ],
        "Profiler parity": [
            "pytest tests/integration/test_profiler_parity.py -v -m main_ops --tb=short"
        ],
        "Native comm bridge": ["python -m pytest tests/integration/test_comm_native_bridge.py -v"],
        "Unit tests": ["python .github/scripts/run_unit_tests.py --timeout 300"],
    }
    for name, commands in expected.items():
        assert groups[name]["run"] == commands, name
    assert groups["Unit tests"]["env"] == {"UNIT_TESTS_ALLOW_TEARDOWN_CRASH": "1"}
    assert groups["Native comm bridge"]["workspace"] == "wheel-only"
    general = " ".join(groups["General tests"]["run"])
    assert "tests/integration/test_amp_contract.py -m amp" in general


def test_build_stage_and_status(manifest: dict) -> None:
    build = manifest["stages"]["build"]
    assert build["env"]["FLAGOS_ACCELERATOR"] == "dcu"
    assert build["env"]["FLAGOS_BUILD_FLAGGEMS_CPP"] == "0"
    assert "bash scripts/vendor/bundle_dcu_libtorch.sh" in build["run"]
    assert manifest["setup"] == "source .github/scripts/set_env_dcu.sh"
    assert manifest["status"] == "beta"
    assert {d["name"] for d in manifest["deferred"]} == {"Inference smoke", "Training smoke"}
    # torch.compile is validated separately and stays out of the manifest (specification).
    commands = [c for g in manifest["stages"]["test"]["groups"] for c in g["run"]]
    assert not [c for c in commands if "test_compile" in c]


def test_shell_syntax() -> None:
    subprocess.run(["bash", "-n", str(SET_ENV)], check=True)
    if shutil.which("shellcheck"):
        result = subprocess.run(["shellcheck", str(SET_ENV)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout


def _source(dtk: Path, hyhal: str, tmp: Path) -> subprocess.CompletedProcess:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp),
        "ROCM_PATH": str(dtk),
        "FLAGOS_HYHAL_DIRS": hyhal,
        "FLAGOS_SET_ENV_DRY_RUN": "1",
        "GITHUB_ENV": str(tmp / "github_env"),
    }
    script = (
        f"source {SET_ENV}; echo STATUS=$?; echo LD=$LD_LIBRARY_PATH; "
        "echo FG=$HSA_FORCE_FINE_GRAIN_PCIE; echo FT=$FLAGTREE_BACKEND"
    )
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)


def test_set_env_dry_run(tmp_path: Path) -> None:
    dtk = make_dtk_tree(tmp_path / "dtk", cuda_dir=None, miopen=False)
    build_standin(tmp_path / "hyhal" / "lib" / "libhydmi.so")
    result = _source(dtk, f"{tmp_path / 'nothing'} {tmp_path / 'hyhal'}", tmp_path)
    out = result.stdout
    assert "STATUS=0" in out, result.stderr
    assert f"LD={tmp_path / 'hyhal' / 'lib'}:{dtk}/lib" in out  # hyhal first, then DTK's env.sh
    assert "FG=1" in out and "FT=hcu" in out
    assert "+ python3 -m pip uninstall -y triton" in out
    assert (
        "+ python3 -m pip install --no-deps flagtree===0.6.2a1+hcu3.6 "
        "--index-url=https://resource.flagos.net/repository/flagos-pypi-hosted/simple" in out
    )
    assert "FlagGems.git@e7b4a865fce6d85861ee91a6aca56564ef9acf7d" in out
    assert "numpy<2" in out
    github_env = (tmp_path / "github_env").read_text()
    assert "HSA_FORCE_FINE_GRAIN_PCIE=1" in github_env and f"ROCM_PATH={dtk}" in github_env


def test_set_env_without_hyhal_warns(tmp_path: Path) -> None:
    dtk = make_dtk_tree(tmp_path / "dtk", cuda_dir=None, miopen=False)
    result = _source(dtk, str(tmp_path / "nothing"), tmp_path)
    assert "STATUS=0" in result.stdout
    assert "no libhydmi.so" in result.stderr


def test_set_env_without_dtk_fails(tmp_path: Path) -> None:
    result = _source(tmp_path / "no-dtk", "", tmp_path)
    assert "STATUS=1" in result.stdout
    assert "env.sh not found; set ROCM_PATH" in result.stderr
