"""A fixture DTK tree: the layout of a Hygon DTK installation with stand-in libraries.

    <root>/env.sh                                  exports ROCM_PATH, PATH, LD_LIBRARY_PATH
    <root>/cuda/cuda-12/include/cuda_runtime_api.h the CUDA compatibility toolkit's headers
                                                   (the host CUDA headers when present, else a stub)
    <root>/cuda/cuda-12/lib64/libcudart.so.12      stand-in runtime (+ libcudart.so link)
    <root>/lib/libMIOpen.so                        stand-in MIOpen
    <root>/lib/cmake/miopen/miopen-config.cmake    exported config with the dangling librt path
    <root>/lib/python3/site-packages/torch/        DTK's torch: version.py and lib/ with stand-in
        lib/lib{c10_hip,torch_hip,magma,...}.so    device (and core) libraries

Every stand-in library records its loading in $FLAGOS_FIXTURE_LOAD_LOG (one file name a line),
so tests can tell what was loaded and in which order. Nothing here needs DTK or a DCU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

HOST_CUDA_INCLUDE = Path("/usr/local/cuda/include")
DANGLING_LIBRT = "/usr/lib/x86_64-linux-gnu/librt.so"
DEVICE_LIBS = ("libc10_hip.so", "libmagma.so", "libtorch_hip.so")
CORE_LIBS = ("libc10.so", "libtorch_cpu.so", "libtorch.so", "libtorch_python.so")

_STANDIN = r"""
#include <stdio.h>
#include <stdlib.h>
__attribute__((constructor)) static void fixture_loaded(void) {
  const char* log = getenv("FLAGOS_FIXTURE_LOAD_LOG");
  if (log) { FILE* f = fopen(log, "a"); if (f) { fprintf(f, "%s\n", FIXTURE_NAME); fclose(f); } }
}
int fixture_symbol_%(ident)s(void) { return 1; }
%(extra)s
"""

# The CUDA runtime entry points the runtime sources call; the stand-in libcudart defines them so
# the core's link records it as needed, as with DTK's real one. Never called here.
CUDART_SYMBOLS = (
    "cudaGetDeviceProperties",
    "cudaGetDeviceProperties_v2",
    "cudaGetErrorString",
    "cudaMemGetInfo",
    "cudaGetDeviceCount",
    "cudaGetDevice",
    "cudaSetDevice",
    "cudaDeviceSynchronize",
)


def build_standin(
    path: Path, *, needed: list[Path] = (), soname: str | None = None, defines: tuple = ()
) -> Path:
    """Compiles a tiny shared library at `path` that logs its loading; `needed` become DT_NEEDED."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ident = "".join(c if c.isalnum() else "_" for c in path.name)
    source = path.with_suffix(".fixture.c")
    extra = "\n".join(f"int {name}(void) {{ abort(); }}" for name in defines)
    source.write_text(_STANDIN.replace("%(ident)s", ident).replace("%(extra)s", extra))
    cmd = ["gcc", "-shared", "-fPIC", f'-DFIXTURE_NAME="{path.name}"', "-o", str(path), str(source)]
    cmd.append(f"-Wl,-soname,{soname or path.name}")
    if needed:
        cmd.append("-Wl,--no-as-needed")
    for lib in needed:
        cmd += [f"-L{lib.parent}", f"-l:{lib.name}"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    source.unlink()
    return path


def make_dtk_tree(
    root: Path,
    *,
    torch_version: str = "2.13.0+das.opt1.dtk25041",
    cuda_dir: str | None = "cuda-12",
    miopen: bool = True,
    hydmi_dependency: bool = False,
) -> Path:
    """Creates the fixture DTK tree under `root` and returns `root`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "env.sh").write_text(
        f'export ROCM_PATH="{root}"\n'
        'export PATH="$ROCM_PATH/bin:$PATH"\n'
        'export LD_LIBRARY_PATH="$ROCM_PATH/lib:$ROCM_PATH/hip/lib:${LD_LIBRARY_PATH:-}"\n'
    )
    (root / "bin").mkdir(exist_ok=True)
    (root / "lib").mkdir(exist_ok=True)

    if cuda_dir:
        cuda = root / "cuda" / cuda_dir
        include = cuda / "include"
        if (HOST_CUDA_INCLUDE / "cuda_runtime_api.h").exists():
            shutil.copytree(HOST_CUDA_INCLUDE, include, symlinks=True, dirs_exist_ok=True)
        else:
            include.mkdir(parents=True, exist_ok=True)
            (include / "cuda_runtime_api.h").write_text("/* fixture stub */\n")
        cudart = build_standin(cuda / "lib64" / "libcudart.so.12", defines=CUDART_SYMBOLS)
        (cuda / "lib64" / "libcudart.so").symlink_to(cudart.name)

    if miopen:
        lib = build_standin(root / "lib" / "libMIOpen.so")
        cfg = root / "lib" / "cmake" / "miopen"
        cfg.mkdir(parents=True, exist_ok=True)
        # What DTK's export looks like in the part that matters: an absolute librt path baked
        # into the link interface of the imported target.
        (cfg / "miopen-config.cmake").write_text(
            "if(NOT TARGET MIOpen)\n"
            "  add_library(MIOpen SHARED IMPORTED)\n"
            "  set_target_properties(MIOpen PROPERTIES\n"
            '    IMPORTED_CONFIGURATIONS "RELEASE"\n'
            f'    IMPORTED_LOCATION_RELEASE "{lib}"\n'
            f'    INTERFACE_LINK_LIBRARIES "{DANGLING_LIBRT};dl")\n'
            "endif()\n"
            "set(miopen_FOUND TRUE)\n"
        )

    torch_dir = root / "lib" / "python3" / "site-packages" / "torch"
    torch_lib = torch_dir / "lib"
    torch_lib.mkdir(parents=True, exist_ok=True)
    (torch_dir / "version.py").write_text(
        f"__version__ = '{torch_version}'\nhip = '6.3.25041'\ncuda = None\n"
    )
    hydmi = None
    if hydmi_dependency:
        # Built, linked against, then moved away: the loader cannot find it at run time,
        # exactly like a host whose hyhal directory is not on LD_LIBRARY_PATH.
        hydmi = build_standin(root / "hyhal-build" / "libhydmi.so")
    for name in CORE_LIBS:
        build_standin(torch_lib / name)
    build_standin(torch_lib / "libc10_hip.so")
    (root / "lib" / "libmagma.so").unlink(missing_ok=True)
    build_standin(root / "lib" / "libmagma.so")  # DTK keeps magma outside torch/lib
    build_standin(torch_lib / "libtorch_hip.so", needed=[hydmi] if hydmi else [])
    if hydmi:
        shutil.rmtree(hydmi.parent)
    return root


def torch_lib_dir(root: Path) -> Path:
    return root / "lib" / "python3" / "site-packages" / "torch" / "lib"


def env_without_loader_paths() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    return env
