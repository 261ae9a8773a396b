"""The dcu branch of the build switches (torch_fl/_build_switches.py, read by setup.py) and the
build record it writes."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dcu.conftest import ROOT, switches

FACTS = {"version": "2.13.0", "full_version": "2.13.0+cpu", "has_cuda": False}


def resolve(**env: str) -> dict:
    return switches.resolve({"FLAGOS_ACCELERATOR": "dcu", **env}, FACTS)


def test_defaults_flaggems_python_path_no_boxing() -> None:
    config = resolve()
    assert config["ACCELERATOR"] == "dcu"
    assert config["BUILD_BOXING"] is False
    assert config["BUILD_FLAGGEMS"] is True
    assert config["BUILD_FLAGGEMS_CPP"] is False
    assert config["BUILD_VENDOR"] is False
    assert config["DCU_VENDOR_CORE"] is False
    assert config["ROCM_PATH"] == "/opt/dtk"


def test_dcu_needs_no_cuda_torch() -> None:
    """The official +cpu torch front-ends the DCU build: no CUDA torch is required."""
    assert resolve(FLAGOS_BUILD_BOXING="1")["BUILD_BOXING"] is True


def test_rocm_path_selects_dtk() -> None:
    assert resolve(ROCM_PATH="/data/dtk-25.04")["ROCM_PATH"] == "/data/dtk-25.04"


def test_flaggems_cpp_forced_off_and_noted() -> None:
    env = {"FLAGOS_ACCELERATOR": "dcu", "FLAGOS_BUILD_FLAGGEMS_CPP": "1"}
    config = switches.resolve(env, FACTS)
    assert config["BUILD_FLAGGEMS_CPP"] is False
    assert any(
        "FLAGOS_BUILD_FLAGGEMS_CPP forced off on dcu" in n for n in switches.notes(env, config)
    )


def test_build_vendor_is_a_noop_and_noted() -> None:
    env = {"FLAGOS_ACCELERATOR": "dcu", "FLAGOS_BUILD_VENDOR": "1"}
    config = switches.resolve(env, FACTS)
    assert config["BUILD_VENDOR"] is False
    assert any("no-op on dcu" in n for n in switches.notes(env, config))
    assert switches.notes({"FLAGOS_ACCELERATOR": "cuda"}, {"ACCELERATOR": "cuda"}) == []


def test_vendor_core_switch_is_recorded() -> None:
    assert resolve(FLAGOS_DCU_VENDOR_CORE="1")["DCU_VENDOR_CORE"] is True


def test_build_record(tmp_path: Path) -> None:
    config = resolve(FLAGOS_BUILD_BOXING="1", ROCM_PATH="/opt/dtk")
    path = tmp_path / "_build_config.py"
    switches.write_build_record(path, config, FACTS)
    record = runpy.run_path(str(path))
    assert record["ACCELERATOR"] == "dcu"
    assert record["GEMS_VENDOR"] == "hygon"
    assert record["BUILD_FLAGGEMS_CPP"] is False
    assert record["ROCM_PATH"] == "/opt/dtk"
    assert 'ACCELERATOR = "dcu"' in path.read_text().replace("'", '"')


def test_record_selects_backends_dcu_conf() -> None:
    if not (ROOT / "torch_fl" / "routing.py").exists() or not list(
        (ROOT / "torch_fl").glob("_C*.so")
    ):
        pytest.skip("the routing layer (torch_fl.routing) is not in this tree or not built")
    code = (
        "from types import SimpleNamespace\nfrom torch_fl import routing\n"
        "print(routing.table_path_for(SimpleNamespace(ACCELERATOR='dcu', BUILD_FLAGGEMS=True)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout
    assert out.strip().endswith("torch_fl/configs/backends_dcu.conf")
