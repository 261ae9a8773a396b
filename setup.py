"""Build torch_fl: reads the FLAGOS_* switches, writes the build record, runs CMake.

`pip install --no-build-isolation -e .` builds against the torch installed in the current
environment. The switches are read here only; at run time the build record
(`torch_fl/_build_config.py`) is the single source of truth.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "torch_fl"))
import _build_switches as switches  # noqa: E402  (the one parser shared with the runtime checks)

sys.path.pop(0)


def _torch_facts() -> dict:
    # The build must not load the (possibly stale or half-built) torch_fl through torch's
    # backend autoloading; this affects only the build process.
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    import torch
    import torch.utils.cpp_extension as cpp_ext

    return {
        "version": torch.__version__.split("+")[0],
        "full_version": torch.__version__,
        "has_cuda": torch.version.cuda is not None,
        "has_hip": getattr(torch.version, "hip", None) is not None,
        "cxx11_abi": int(torch._C._GLIBCXX_USE_CXX11_ABI),
        "include_dirs": cpp_ext.include_paths(),
        "library_dir": cpp_ext.library_paths()[0],
    }


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures and builds the CMake project, placing outputs beside the extension path."""

    def build_extension(self, ext: Extension) -> None:
        torch_facts = _torch_facts()
        config = switches.resolve(os.environ, torch_facts)
        for note in switches.notes(os.environ, config):
            print(f"torch_fl build: {note}", flush=True)
        # Every switch is read before anything is written: a bad value changes nothing.
        build_tests = switches.flag(os.environ, "FLAGOS_BUILD_TESTS")
        build_vendor = switches.flag(os.environ, "FLAGOS_BUILD_VENDOR")
        ext_path = Path(self.get_ext_fullpath(ext.name)).resolve()
        # Outputs always land in the source package (what an editable install imports); a
        # wheel build then copies them to where setuptools packs the extension.
        package_dir = (ROOT / "torch_fl").resolve()

        build_dir = ROOT / "build" / f"{config['ACCELERATOR']}-torch{torch_facts['version']}"
        build_dir.mkdir(parents=True, exist_ok=True)
        major, minor = (int(p) for p in torch_facts["version"].split(".")[:2])
        cmake_args = [
            f"-S{ROOT}",
            f"-B{build_dir}",
            "-GNinja",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('FLAGOS_BUILD_TYPE', 'Release')}",
            f"-DFLAGOS_ACCELERATOR={config['ACCELERATOR']}",
            f"-DFLAGOS_BUILD_BOXING={'ON' if config['BUILD_BOXING'] else 'OFF'}",
            f"-DFLAGOS_BUILD_TESTS={'ON' if build_tests else 'OFF'}",
            f"-DFLAGOS_PACKAGE_DIR={package_dir}",
            f"-DFLAGOS_EXT_NAME={ext_path.name}",
            f"-DFLAGOS_TORCH_INCLUDE_DIRS={';'.join(torch_facts['include_dirs'])}",
            f"-DFLAGOS_TORCH_LIBRARY_DIR={torch_facts['library_dir']}",
            f"-DFLAGOS_TORCH_MAJOR={major}",
            f"-DFLAGOS_TORCH_MINOR={minor}",
            f"-DFLAGOS_CXX11_ABI={torch_facts['cxx11_abi']}",
            f"-DPython_INCLUDE_DIR={sysconfig.get_paths()['include']}",
            f"-DFLAGOS_PYTHON={sys.executable}",
        ]
        if config["ACCELERATOR"] == "dcu":
            vendor_core = "ON" if config["DCU_VENDOR_CORE"] else "OFF"
            vendor = "ON" if build_vendor else "OFF"
            cmake_args.append(f"-DROCM_PATH={config['ROCM_PATH']}")
            cmake_args += [
                f"-DFLAGOS_DCU_VENDOR_CORE={vendor_core}",
                f"-DFLAGOS_BUILD_VENDOR={vendor}",
            ]
        cmake_args += shlex.split(os.environ.get("FLAGOS_CMAKE_ARGS", ""))
        jobs = os.environ.get("MAX_JOBS") or str(os.cpu_count() or 1)
        subprocess.check_call(["cmake", *cmake_args])
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", jobs])
        _check_one_cxx_runtime(package_dir / "lib" / "libtorch_fl_core.so")
        # Only now: a build that failed leaves the record of the build that is installed.
        switches.write_build_record(package_dir / "_build_config.py", config, torch_facts)
        if ext_path.parent != package_dir:
            ext_path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(package_dir / ext_path.name, ext_path)
            shutil.copytree(package_dir / "lib", ext_path.parent / "lib", dirs_exist_ok=True)
            bridge = package_dir / "comm" / "_nccl_ext"  # the NCCL bridge, where it was built
            for module in bridge.glob("_flagos_nccl*.so"):
                (ext_path.parent / "comm" / "_nccl_ext").mkdir(parents=True, exist_ok=True)
                shutil.copy2(module, ext_path.parent / "comm" / "_nccl_ext" / module.name)
            if (package_dir / "lib_dcu").is_dir():  # the dcu bundle (ABI shim + DTK libs)
                shutil.copytree(
                    package_dir / "lib_dcu", ext_path.parent / "lib_dcu", dirs_exist_ok=True
                )
            shutil.copy2(package_dir / "_build_config.py", ext_path.parent / "_build_config.py")


def _check_one_cxx_runtime(library: Path) -> None:
    """Refuses a core that carries its own copy of libstdc++ internals.

    Some toolchains (a newer GCC whose libstdc++ is not the one the process loads, or one
    configured to link parts of it statically) put libstdc++'s locale machinery into the
    library; beside torch's shared libstdc++ its facet ids disagree, and formatting a number
    into an error message then crashes. Seen with CXX=/opt/gcc/bin/g++ on a GPU image.
    """
    nm = shutil.which("nm")
    if nm is None or not library.is_file():
        return
    symbols = subprocess.run(
        [nm, "-C", "--defined-only", str(library)], capture_output=True, text=True, check=False
    ).stdout
    if " std::locale::" not in symbols:
        return
    cxx = os.environ.get("CXX", "c++")
    raise RuntimeError(
        f"{library.name} was linked with parts of the C++ runtime of {cxx} inside it, beside "
        "the shared libstdc++ torch uses; it would crash when formatting error messages. "
        "Build with the compiler that matches the system libstdc++, e.g. "
        "CXX=/usr/bin/g++ CC=/usr/bin/gcc pip install --no-build-isolation -e . "
        "(remove the build/ folder first)"
    )


setup(
    ext_modules=[CMakeExtension("torch_fl._C")],
    cmdclass={"build_ext": CMakeBuild},
)
