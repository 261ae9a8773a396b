"""The dcu branch of the build switches (torch_fl/_build_switches.py, read by setup.py) and the
build record it writes."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from tests.dcu.conftest import ROOT, switches
from tests.setup_py_tree import copy_setup_tree, run_build_ext

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
    assert config["BUILD_VENDOR"] is True  # recorded as requested; it changes nothing on dcu
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


def test_setup_py_dcu_branch(tmp_path: Path) -> None:
    """`FLAGOS_ACCELERATOR=dcu python setup.py build_ext --inplace` on a copy of the tree, with a
    recording stand-in for cmake: the notes, the build record and the CMake arguments."""
    import os

    tree = copy_setup_tree(tmp_path / "tree")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "cmake.args"
    fake = bin_dir / "cmake"
    # Records its arguments; at configure, leaves the outputs a build would (empty files).
    fake.write_text(
        f"#!{sys.executable}\n"
        "import sys, pathlib\n"
        f"open({str(log)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        "defs = [a[2:] for a in sys.argv[1:] if a.startswith('-D') and '=' in a]\n"
        "args = dict(d.split('=', 1) for d in defs)\n"
        "if 'FLAGOS_PACKAGE_DIR' in args:\n"
        "    pkg = pathlib.Path(args['FLAGOS_PACKAGE_DIR'])\n"
        "    (pkg / 'lib').mkdir(parents=True, exist_ok=True)\n"
        "    (pkg / args['FLAGOS_EXT_NAME']).write_bytes(b'')\n"
    )
    fake.chmod(0o755)
    env = dict(os.environ)
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        FLAGOS_ACCELERATOR="dcu",
        FLAGOS_BUILD_BOXING="1",
        FLAGOS_BUILD_FLAGGEMS_CPP="1",
        FLAGOS_BUILD_VENDOR="1",
        FLAGOS_DCU_VENDOR_CORE="1",
        ROCM_PATH="/data/dtk",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        MAX_JOBS="1",
    )
    result = run_build_ext(tree, env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "FLAGOS_BUILD_VENDOR=1 is a no-op on dcu" in result.stdout
    assert "FLAGOS_BUILD_FLAGGEMS_CPP forced off on dcu" in result.stdout
    record = runpy.run_path(str(tree / "torch_fl" / "_build_config.py"))
    assert record["ACCELERATOR"] == "dcu" and record["GEMS_VENDOR"] == "hygon"
    assert record["BUILD_FLAGGEMS_CPP"] is False and record["BUILD_VENDOR"] is True
    assert record["DCU_VENDOR_CORE"] is True and record["ROCM_PATH"] == "/data/dtk"
    configure = log.read_text().splitlines()[0]
    for arg in (
        "-DFLAGOS_ACCELERATOR=dcu",
        "-DFLAGOS_BUILD_BOXING=ON",
        "-DROCM_PATH=/data/dtk",
        "-DFLAGOS_DCU_VENDOR_CORE=ON",
        "-DFLAGOS_BUILD_VENDOR=ON",
    ):
        assert arg in configure.split(), configure
