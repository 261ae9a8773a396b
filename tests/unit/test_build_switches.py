"""Build switch parsing (torch_fl/_build_switches.py): pure Python, no build, no torch needed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.setup_py_tree import copy_setup_tree, run_build_ext

REPO_ROOT = Path(__file__).resolve().parents[2]


def _load_switches():
    # Loaded by path, as setup.py does, so the test needs neither torch nor a built package.
    path = REPO_ROOT / "torch_fl" / "_build_switches.py"
    spec = importlib.util.spec_from_file_location("_build_switches_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


switches = _load_switches()
resolve = switches.resolve
BuildSwitchError = switches.BuildSwitchError

CPU_TORCH = {"has_cuda": False, "has_hip": False, "version": "2.13.0", "full_version": "2.13.0+cpu"}
CUDA_TORCH = {
    "has_cuda": True,
    "has_hip": False,
    "version": "2.11.0",
    "full_version": "2.11.0+cu130",
}
HIP_TORCH = {"has_cuda": False, "has_hip": True, "version": "2.10.0", "full_version": "2.10.0+das"}


def test_defaults_on_cpu_torch() -> None:
    config = resolve({}, CPU_TORCH)
    assert config == {
        "ACCELERATOR": "cpu",
        "BUILD_BOXING": False,
        "BUILD_FLAGGEMS": False,
        "BUILD_FLAGGEMS_CPP": False,
        "BUILD_VENDOR": False,
        "DCU_VENDOR_CORE": False,
        "ROCM_PATH": "",
    }


def test_defaults_on_cuda_torch() -> None:
    config = resolve({}, CUDA_TORCH)
    assert config["ACCELERATOR"] == "cuda"
    assert config["BUILD_BOXING"] is True  # the cuda accelerator boxes by default
    assert config["BUILD_FLAGGEMS"] is False
    assert config["ROCM_PATH"] == ""


def test_explicit_cpu_on_cuda_torch() -> None:
    config = resolve({"FLAGOS_ACCELERATOR": "cpu"}, CUDA_TORCH)
    assert config["ACCELERATOR"] == "cpu" and config["BUILD_BOXING"] is False


@pytest.mark.parametrize("spelling", ["CPU", " cpu ", "Cpu"])
def test_accelerator_is_case_and_space_insensitive(spelling: str) -> None:
    assert resolve({"FLAGOS_ACCELERATOR": spelling}, CPU_TORCH)["ACCELERATOR"] == "cpu"


def test_empty_accelerator_means_default() -> None:
    assert resolve({"FLAGOS_ACCELERATOR": ""}, CUDA_TORCH)["ACCELERATOR"] == "cuda"


@pytest.mark.parametrize("value", ["rocm", "gpu", "cuda12", "npu"])
def test_unknown_accelerator_rejected_with_choices(value: str) -> None:
    with pytest.raises(BuildSwitchError) as info:
        resolve({"FLAGOS_ACCELERATOR": value}, CPU_TORCH)
    message = str(info.value)
    assert repr(value) in message
    for choice in ("cpu", "cuda", "dcu"):
        assert choice in message


def test_cuda_accelerator_needs_cuda_torch() -> None:
    with pytest.raises(BuildSwitchError, match="needs a torch built with CUDA") as info:
        resolve({"FLAGOS_ACCELERATOR": "cuda"}, CPU_TORCH)
    assert "2.13.0+cpu" in str(info.value)
    assert resolve({"FLAGOS_ACCELERATOR": "cuda"}, HIP_TORCH)["ACCELERATOR"] == "cuda"


@pytest.mark.parametrize("value", ["1", "on", "ON", "true", "True", "yes", " 1 "])
def test_true_spellings(value: str) -> None:
    assert switches.flag({"X": value}, "X") is True


@pytest.mark.parametrize("value", ["0", "off", "OFF", "false", "no", ""])
def test_false_spellings(value: str) -> None:
    assert switches.flag({"X": value}, "X", default=True) is False


def test_flag_default_when_unset() -> None:
    assert switches.flag({}, "X") is False
    assert switches.flag({}, "X", default=True) is True


@pytest.mark.parametrize(
    "name",
    [
        "FLAGOS_BUILD_BOXING",
        "FLAGOS_BUILD_FLAGGEMS",
        "FLAGOS_BUILD_FLAGGEMS_CPP",
        "FLAGOS_BUILD_VENDOR",
        "FLAGOS_DCU_VENDOR_CORE",
    ],
)
@pytest.mark.parametrize("value", ["2", "maybe", "enable", "y"])
def test_invalid_boolean_values_rejected(name: str, value: str) -> None:
    env = {"FLAGOS_ACCELERATOR": "cuda", name: value}
    with pytest.raises(BuildSwitchError) as info:
        resolve(env, CUDA_TORCH)
    message = str(info.value)
    assert name in message and repr(value) in message
    assert "1/0" in message  # lists the accepted spellings


@pytest.mark.parametrize("value", ["1", "on", "true"])
def test_cpu_with_boxing_rejected(value: str) -> None:
    with pytest.raises(BuildSwitchError, match="FLAGOS_BUILD_BOXING=1") as info:
        resolve({"FLAGOS_ACCELERATOR": "cpu", "FLAGOS_BUILD_BOXING": value}, CPU_TORCH)
    assert "cuda" in str(info.value) and "dcu" in str(info.value)
    with pytest.raises(BuildSwitchError, match="FLAGOS_BUILD_BOXING"):
        resolve({"FLAGOS_BUILD_BOXING": value}, CPU_TORCH)  # cpu by default on a cpu torch


def test_cpu_with_boxing_off_accepted() -> None:
    assert resolve({"FLAGOS_BUILD_BOXING": "0"}, CPU_TORCH)["BUILD_BOXING"] is False


def test_cuda_boxing_can_be_turned_off() -> None:
    assert resolve({"FLAGOS_BUILD_BOXING": "off"}, CUDA_TORCH)["BUILD_BOXING"] is False


def test_dcu_defaults() -> None:
    config = resolve({"FLAGOS_ACCELERATOR": "dcu"}, CPU_TORCH)
    assert config["ACCELERATOR"] == "dcu"
    assert config["BUILD_BOXING"] is False  # boxing is opt-in on dcu
    assert config["BUILD_FLAGGEMS"] is True  # FlagGems-primary
    assert config["BUILD_FLAGGEMS_CPP"] is False
    assert config["ROCM_PATH"] == "/opt/dtk"


def test_dcu_boxing_build_and_rocm_path() -> None:
    env = {"FLAGOS_ACCELERATOR": "dcu", "FLAGOS_BUILD_BOXING": "1", "ROCM_PATH": "/opt/dtk-25.04"}
    config = resolve(env, CPU_TORCH)
    assert config["BUILD_BOXING"] is True
    assert config["ROCM_PATH"] == "/opt/dtk-25.04"


@pytest.mark.parametrize("value", ["1", "ON", "true"])
def test_dcu_forces_flaggems_cpp_off(value: str) -> None:
    env = {"FLAGOS_ACCELERATOR": "dcu", "FLAGOS_BUILD_FLAGGEMS_CPP": value}
    config = resolve(env, CPU_TORCH)
    assert config["BUILD_FLAGGEMS_CPP"] is False
    env["FLAGOS_BUILD_FLAGGEMS"] = "1"
    assert resolve(env, CPU_TORCH)["BUILD_FLAGGEMS"] is True


def test_dcu_flaggems_can_be_turned_off() -> None:
    env = {"FLAGOS_ACCELERATOR": "dcu", "FLAGOS_BUILD_FLAGGEMS": "0"}
    assert resolve(env, CPU_TORCH)["BUILD_FLAGGEMS"] is False


def test_flaggems_cpp_on_other_accelerators_is_an_error() -> None:
    for accelerator, facts in (("cpu", CPU_TORCH), ("cuda", CUDA_TORCH)):
        env = {"FLAGOS_ACCELERATOR": accelerator, "FLAGOS_BUILD_FLAGGEMS_CPP": "1"}
        with pytest.raises(BuildSwitchError, match="FLAGOS_BUILD_FLAGGEMS_CPP"):
            resolve(env, facts)


def test_rocm_path_ignored_off_dcu() -> None:
    assert resolve({"ROCM_PATH": "/opt/rocm"}, CPU_TORCH)["ROCM_PATH"] == ""


def test_vendor_and_vendor_core_switches() -> None:
    env = {"FLAGOS_ACCELERATOR": "dcu", "FLAGOS_BUILD_VENDOR": "1", "FLAGOS_DCU_VENDOR_CORE": "1"}
    config = resolve(env, CPU_TORCH)
    assert config["BUILD_VENDOR"] is True and config["DCU_VENDOR_CORE"] is True


def test_gems_vendor() -> None:
    assert switches.gems_vendor("cuda") == "nvidia"
    assert switches.gems_vendor("dcu") == "hygon"
    assert switches.gems_vendor("cpu") == ""


def test_build_record_round_trip(tmp_path: Path) -> None:
    config = resolve({"FLAGOS_ACCELERATOR": "dcu", "FLAGOS_BUILD_BOXING": "1"}, CPU_TORCH)
    record = tmp_path / "pkg" / "_build_config.py"
    switches.write_build_record(record, config, CPU_TORCH)
    namespace: dict = {}
    exec(record.read_text(), namespace)
    for key, value in config.items():
        assert namespace[key] == value, key
    assert namespace["GEMS_VENDOR"] == "hygon"
    assert namespace["TORCH_VERSION"] == "2.13.0"
    assert namespace["TORCH_FULL_VERSION"] == "2.13.0+cpu"
    before = record.stat().st_mtime_ns
    switches.write_build_record(record, config, CPU_TORCH)  # unchanged: not rewritten
    assert record.stat().st_mtime_ns == before


def test_module_does_not_import_torch() -> None:
    source = (REPO_ROOT / "torch_fl" / "_build_switches.py").read_text()
    assert "import torch" not in source


def _tree_with_failing_cmake(tmp_path: Path) -> tuple[Path, dict]:
    """A copy of setup.py and the package's build-time files, with a cmake that fails."""
    import os

    tree = copy_setup_tree(tmp_path / "tree")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "cmake"
    fake.write_text(f"#!{sys.executable}\nraise SystemExit('configure failed')\n")
    fake.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", MAX_JOBS="1")
    env.update(TORCH_DEVICE_BACKEND_AUTOLOAD="0", FLAGOS_ACCELERATOR="cpu")
    return tree, env


@pytest.mark.parametrize(
    "bad", [{}, {"FLAGOS_BUILD_TESTS": "maybe"}], ids=["cmake_fails", "bad_switch"]
)
def test_a_failed_build_leaves_the_installed_build_record(tmp_path: Path, bad: dict) -> None:
    # The record must keep describing the binaries that are installed: rewritten before a build
    # that then failed, it would name another build and make `import torch_fl` refuse.

    tree, env = _tree_with_failing_cmake(tmp_path)
    record = tree / "torch_fl" / "_build_config.py"
    installed = "ACCELERATOR = 'cuda'\nTORCH_VERSION = '2.11.0'\n"
    record.write_text(installed)
    env.update(bad)
    result = run_build_ext(tree, env)
    assert result.returncode != 0
    expected = "FLAGOS_BUILD_TESTS" if bad else "configure failed"
    assert expected in result.stdout + result.stderr
    assert record.read_text() == installed
