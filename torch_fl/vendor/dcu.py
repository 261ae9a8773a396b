"""The dcu accelerator's import-time steps and troubleshooting checks (Hygon DCU, DTK).

A FLAGOS_BUILD_BOXING=1 dcu build runs the official torch core with DTK's device libraries
(libc10_hip.so, libtorch_hip.so, libmagma.so) from the package's bundle, `torch_fl/lib_dcu/`,
staged by `scripts/vendor/bundle_dcu_libtorch.sh` together with a manifest (`bundle.json`).
`prelude()` runs from `import torch_fl` before torch is imported by torch_fl and

1. checks the manifest against the build record (the mode: default ABI-shim layout or the
   legacy full-core layout, FLAGOS_DCU_VENDOR_CORE=1) and the files on disk;
2. checks the installed torch's version against the one the bundle was built for (minor version
   in the default layout, three-part version in the full-core layout) *before any library is
   loaded*: dlopen would accept a mismatch silently;
3. loads the libraries in the manifest's order with RTLD_GLOBAL, turning a missing dependency
   into a message that says what to fix (libhydmi.so: the hyhal directory);
4. checks that torch's CUDA hooks, which torch caches on first use, are the ones the bundle
   registered: if torch touched them before the bundle was loaded, the process would be
   half-wired (kernels registered, device init unreachable), so the import fails instead.

The torch installation is never modified. This module imports no torch at module level.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType

PACKAGE_DIR = Path(__file__).resolve().parents[1]
BUNDLE_DIRNAME = "lib_dcu"
MANIFEST_NAME = "bundle.json"
MANIFEST_FORMAT = 1
MODE_SHIM = "abi-shim"  # default: DTK's device libraries + the ABI shim on the official core
MODE_CORE = "vendor-core"  # legacy: DTK's full core set, selected before torch loads
SHIM_LIB = "libflagos_dcu_abi_shim.so"
PROBE_LIB = "libflagos_dcu_probe.so"
# The official torch libraries DTK's device libraries bind to in the default layout.
OFFICIAL_CORE_LIBS = ("libc10.so", "libtorch_cpu.so")
HYHAL_LIB_DIRS = ("/usr/local/hyhal/lib", "/opt/hyhal/lib")
DEVICE_NODES = ("/dev/kfd", "/dev/dri")
FLAGTREE_INSTALL = (
    "python3 -m pip uninstall -y triton   # repeat until fully uninstalled\n"
    '  python3 -m pip install "flagtree===0.6.2a1+hcu3.6" \\\n'
    "    --index-url=https://resource.flagos.net/repository/flagos-pypi-hosted/simple"
)
_BUNDLE_CMD = "bash scripts/vendor/bundle_dcu_libtorch.sh"

_loaded: list[str] = []  # paths this process loaded from the bundle, in order


class DcuBundleError(ImportError):
    """The DCU bundle cannot be loaded into this process; the message says how to fix it."""


# ---- versions -------------------------------------------------------------------------------


def _version_parts(version: str, count: int) -> tuple[int, ...]:
    numbers = re.findall(r"\d+", version.split("+")[0])
    if len(numbers) < count:
        raise ValueError(f"cannot read a {count}-part version from {version!r}")
    return tuple(int(n) for n in numbers[:count])


def installed_torch() -> tuple[str, Path | None]:
    """(version, torch/lib dir) of the torch this interpreter would import, without importing it."""
    module = sys.modules.get("torch")
    if module is not None and getattr(module, "__version__", None):
        return str(module.__version__), Path(module.__file__).resolve().parent / "lib"
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise DcuBundleError(
            "torch_fl (dcu) needs the official torch wheel of the bundle's minor version "
            "installed (the +cpu build is enough); no torch is importable in this environment"
        )
    torch_dir = Path(next(iter(spec.submodule_search_locations)))
    text = (torch_dir / "version.py").read_text()
    match = re.search(r"""^__version__\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""", text, re.M)
    if not match:
        raise DcuBundleError(f"cannot read torch's version from {torch_dir / 'version.py'}")
    return match.group(1), torch_dir / "lib"


# ---- the manifest ---------------------------------------------------------------------------


def bundle_dir(package_dir: Path = PACKAGE_DIR) -> Path:
    return package_dir / BUNDLE_DIRNAME


def read_manifest(directory: Path) -> dict | None:
    """The bundle's manifest, None when no bundle was staged; malformed ones are errors."""
    path = directory / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DcuBundleError(f"{path} is unreadable ({exc}); re-run {_BUNDLE_CMD}") from exc
    keys = ("format", "mode", "torch_version", "files", "load_order")
    missing = [k for k in keys if k not in manifest]
    if missing or manifest.get("format") != MANIFEST_FORMAT:
        raise DcuBundleError(
            f"{path} is not a format-{MANIFEST_FORMAT} bundle manifest (missing: {missing}, "
            f"format: {manifest.get('format')!r}); re-run {_BUNDLE_CMD}"
        )
    return manifest


def expected_mode(record: ModuleType) -> str:
    return MODE_CORE if getattr(record, "DCU_VENDOR_CORE", False) else MODE_SHIM


def _mode_switch(mode: str) -> str:
    return "FLAGOS_DCU_VENDOR_CORE=1" if mode == MODE_CORE else "FLAGOS_DCU_VENDOR_CORE unset"


def check_manifest(
    manifest: Mapping, record: ModuleType, torch_version: str, directory: Path
) -> None:
    """Mode, version and files of the bundle against this build and this torch; no loading."""
    built_mode, bundle_mode = expected_mode(record), manifest["mode"]
    if bundle_mode not in (MODE_SHIM, MODE_CORE):
        raise DcuBundleError(f"{directory / MANIFEST_NAME}: unknown bundle mode {bundle_mode!r}")
    if bundle_mode != built_mode:
        raise DcuBundleError(
            f"torch_fl was built for the '{built_mode}' DCU layout ({_mode_switch(built_mode)}) "
            f"but the bundle in {directory} is a '{bundle_mode}' bundle "
            f"({_mode_switch(bundle_mode)}). The two layouts are not interchangeable; run both "
            f"`FLAGOS_ACCELERATOR=dcu python setup.py build_ext --inplace` and `{_BUNDLE_CMD}` "
            "with the same FLAGOS_DCU_VENDOR_CORE setting."
        )

    vendor = str(manifest["torch_version"])
    parts = 3 if bundle_mode == MODE_CORE else 2
    try:
        wanted, have = _version_parts(vendor, parts), _version_parts(torch_version, parts)
    except ValueError as exc:
        raise DcuBundleError(f"{directory / MANIFEST_NAME}: {exc}") from exc
    if wanted != have:
        required = ".".join(map(str, wanted))
        what = "three-part version" if parts == 3 else "minor version"
        raise DcuBundleError(
            f"torch_fl's DCU bundle ({directory}) was built from DTK torch {vendor} and needs "
            f"the installed torch to be {required}{'' if parts == 3 else '.x'} (same {what}), "
            f"but torch {torch_version} is installed. Install the official torch {required} "
            f"wheel (the +cpu build is enough), e.g. pip install 'torch=={required}"
            f"{'' if parts == 3 else '.*'}' --index-url https://download.pytorch.org/whl/cpu, "
            f"or re-stage the bundle from a DTK torch matching {torch_version}."
        )

    problems = []
    for entry in manifest["files"]:
        path = directory / entry["name"]
        if not path.exists():
            problems.append(f"{entry['name']} is missing")
        elif path.stat().st_size != entry["size"]:
            size = path.stat().st_size
            problems.append(f"{entry['name']} has {size} bytes, the manifest says {entry['size']}")
    if problems:
        raise DcuBundleError(
            f"the DCU bundle in {directory} does not match its manifest: {'; '.join(problems)}. "
            f"Re-run {_BUNDLE_CMD}."
        )
    names = {entry["name"] for entry in manifest["files"]}
    unknown = [n for n in manifest["load_order"] if n not in names]
    if unknown:
        raise DcuBundleError(f"{directory / MANIFEST_NAME}: load_order names unlisted {unknown}")


def verify_hashes(directory: Path) -> list[str]:
    """Full sha256 check of the bundle (slow for libtorch_hip.so; not done at import)."""
    manifest = read_manifest(directory)
    if manifest is None:
        return [f"no {MANIFEST_NAME} in {directory}"]
    problems = []
    for entry in manifest["files"]:
        path = directory / entry["name"]
        if not path.exists():
            problems.append(f"{entry['name']}: missing")
            continue
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != entry["sha256"]:
            problems.append(f"{entry['name']}: sha256 differs from the manifest")
    return problems


# ---- loading --------------------------------------------------------------------------------


def explain_load_error(path: Path, error: OSError, rocm_path: str = "") -> str:
    """The message for a failed dlopen of a bundled library, naming what to fix."""
    text = str(error)
    if "libhydmi.so" in text:
        present = [d for d in HYHAL_LIB_DIRS if (Path(d) / "libhydmi.so").exists()]
        where = (
            f"found in {', '.join(present)}, which is not on LD_LIBRARY_PATH"
            if present
            else f"not found in {' or '.join(HYHAL_LIB_DIRS)} on this machine"
        )
        return (
            f"cannot load {path.name}: libhydmi.so (the Hygon DMI device management library of "
            f"the hyhal driver stack) is {where}. Add the hyhal library directory to the loader "
            "path, e.g.\n  export LD_LIBRARY_PATH=/usr/local/hyhal/lib:$LD_LIBRARY_PATH\n"
            "(or /opt/hyhal/lib if that is where it is symlinked), then start Python again.\n"
            f"dlopen said: {text}"
        )
    root = rocm_path or "/opt/dtk"
    return (
        f"cannot load {path} from torch_fl's DCU bundle: {text}. DTK's runtime libraries must "
        f"be on the loader path: source {root}/env.sh (ROCM_PATH={root}) before starting Python."
    )


def _dlopen(path: Path, rocm_path: str) -> None:
    try:
        ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    except OSError as exc:
        raise DcuBundleError(explain_load_error(path, exc, rocm_path)) from None
    _loaded.append(str(path))


def _mapped(name: str) -> list[str]:
    """Paths of loaded objects whose file name is `name` (from /proc/self/maps)."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return sorted({line.split()[-1] for line in maps.splitlines() if line.endswith("/" + name)})


def load_bundle(
    manifest: Mapping, directory: Path, torch_lib: Path | None, rocm_path: str = ""
) -> None:
    """dlopens the bundle in its manifest order (RTLD_GLOBAL), official core first if needed."""
    if manifest["mode"] == MODE_CORE:
        # The full core set must be the one torch binds to: nothing of torch may be loaded yet.
        stray = [p for n in OFFICIAL_CORE_LIBS for p in _mapped(n) if Path(p).parent != directory]
        if "torch" in sys.modules or stray:
            raise DcuBundleError(
                "torch_fl's DCU bundle uses the full-core layout (FLAGOS_DCU_VENDOR_CORE=1), "
                "which must select DTK's torch runtime before torch is loaded, but torch is "
                f"already loaded in this process ({', '.join(stray) or 'torch imported'}). "
                "Import torch_fl before torch in a fresh process (with torch's backend autoload "
                "disabled: TORCH_DEVICE_BACKEND_AUTOLOAD=0 python -c 'import torch_fl, torch')."
            )
    elif torch_lib is not None:
        # Default layout: DTK's device libraries bind to the official core, loaded first.
        for name in OFFICIAL_CORE_LIBS:
            if (torch_lib / name).exists():
                _dlopen(torch_lib / name, rocm_path)
    for name in manifest["load_order"]:
        _dlopen(directory / name, rocm_path)


def cuda_hooks_state(probe: Path) -> int:
    """0: torch's CUDA hooks are the bundle's; 1: torch cached its stub hooks before the bundle
    registered its own (half-wired); 2: nothing registered CUDA hooks. -1: no probe library."""
    if not probe.exists():
        return -1
    lib = ctypes.CDLL(str(probe), mode=ctypes.RTLD_GLOBAL)
    return int(lib.flagos_dcu_cuda_hooks_state())


def check_cuda_hooks(probe: Path) -> None:
    state = cuda_hooks_state(probe)
    if state == 1:
        raise DcuBundleError(
            "torch initialised its CUDA hooks before torch_fl loaded DTK's device libraries, so "
            "the HIP kernels libtorch_hip.so registered cannot be reached by device init (a "
            "half-wired process). Import torch_fl before torch in a fresh process "
            "(`import torch_fl` first; it imports torch itself). Note that `import torch` alone "
            "creates those hooks before its backend autoload reaches torch_fl, so on a dcu "
            "build with the bundle the autoload path cannot wire the device either."
        )
    if state == 2:
        raise DcuBundleError(
            "torch_fl loaded its DCU bundle but no CUDA hooks were registered: the bundled "
            f"libtorch_hip.so in {bundle_dir()} is not DTK's device library. Re-run {_BUNDLE_CMD}."
        )


def prelude(record: ModuleType, package_dir: Path = PACKAGE_DIR) -> None:
    """The pre-torch import step of a dcu build (see the module docstring)."""
    if _loaded:
        return
    directory = bundle_dir(package_dir)
    manifest = read_manifest(directory)
    if manifest is None:
        if getattr(record, "BUILD_BOXING", False):
            raise DcuBundleError(
                "this torch_fl is a FLAGOS_BUILD_BOXING=1 dcu build, which runs on DTK's device "
                f"libraries, but no bundle was staged ({directory / MANIFEST_NAME} is missing). "
                f"Stage it: ROCM_PATH={getattr(record, 'ROCM_PATH', '') or '/opt/dtk'} "
                f"{_BUNDLE_CMD}"
                + (" (with FLAGOS_DCU_VENDOR_CORE=1)" if expected_mode(record) == MODE_CORE else "")
            )
        return  # the default build: FlagGems Python path, no vendor torch
    torch_version, torch_lib = installed_torch()
    check_manifest(manifest, record, torch_version, directory)
    torch_first = "torch" in sys.modules
    load_bundle(manifest, directory, torch_lib, getattr(record, "ROCM_PATH", ""))
    if torch_first and manifest["mode"] == MODE_SHIM:
        check_cuda_hooks(package_dir / "lib" / PROBE_LIB)


def after_load(device_count: Callable[[], int], package_dir: Path = PACKAGE_DIR) -> None:
    """After the core loaded: the bundle's hooks must be torch's, and a device should be seen.
    torch.version.hip reports the bundle's HIP version, as DTK's own torch does (the official
    +cpu torch front-ending the bundle has None there; only this process's attribute is set)."""
    if _loaded:
        manifest = read_manifest(bundle_dir(package_dir))
        if manifest["mode"] == MODE_SHIM:
            check_cuda_hooks(package_dir / "lib" / PROBE_LIB)
        import torch.version

        if manifest.get("hip_version") and getattr(torch.version, "hip", None) is None:
            torch.version.hip = manifest["hip_version"]
    check_device_count(device_count)


# ---- checks the rest of torch_fl calls ------------------------------------------------------


def device_count_checks() -> list[str]:
    """What to check when no DCU is visible, with what this process can see filled in."""
    checks = ["the DCU driver is loaded: run the vendor's driver diagnostics (e.g. hy-smi)"]
    for node in DEVICE_NODES:
        if not os.path.exists(node):
            state = "is missing"
        elif not os.access(node, os.R_OK | os.W_OK):
            state = "exists but is not readable and writable by this user"
        else:
            state = "is accessible"
        checks.append(f"{node} {state}")
    checks.append(
        "in a container: run it with --privileged, or pass the devices through "
        "(--device=/dev/kfd --device=/dev/dri)"
    )
    for var in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        if var in os.environ:
            checks.append(f"{var}={os.environ[var]!r} limits the visible devices")
    return checks


def check_device_count(device_count: Callable[[], int]) -> int:
    """Warns with the checks to run when a dcu build sees no device; returns the count."""
    try:
        count = int(device_count())
    except RuntimeError as exc:  # no CUDA guard registered: DTK's device libraries not loaded
        loaded = "loaded" if _loaded else "not loaded (no bundle in torch_fl/lib_dcu)"
        checks = "\n".join(f"  - {c}" for c in device_count_checks())
        warnings.warn(
            f"torch.flagos.device_count() failed on this dcu build ({exc}); DTK's device "
            f"libraries are {loaded}. Stage them with {_BUNDLE_CMD}, then check:\n{checks}",
            RuntimeWarning,
            stacklevel=2,
        )
        return 0
    if count == 0:
        found = device_count_checks()
        if not _loaded:
            found.insert(
                0,
                "DTK's device libraries are not loaded (no bundle in torch_fl/lib_dcu): the "
                f"dcu runtime reaches the device through them; stage them with {_BUNDLE_CMD}",
            )
        checks = "\n".join(f"  - {c}" for c in found)
        warnings.warn(
            "torch.flagos.device_count() is 0 on this dcu build: no Hygon DCU is visible. "
            f"Check:\n{checks}",
            RuntimeWarning,
            stacklevel=2,
        )
    return count


def check_hcu_triton() -> None:
    """Raises when the active Triton has no `hcu` backend (FlagGems on DCU needs FlagTree's).

    Called at the first use of the flagos_python route on a dcu build."""
    try:
        import triton
        import triton.backends
    except ImportError as exc:
        raise RuntimeError(
            "FlagGems on DCU needs FlagTree's Triton with the hcu backend, but triton cannot be "
            f"imported ({exc}). Install it into this environment:\n  {FLAGTREE_INSTALL}"
        ) from exc
    backends = getattr(triton.backends, "backends", None) or {}
    if "hcu" not in backends:
        raise RuntimeError(
            "Triton: No backend registered for 'hcu'. The active triton "
            f"({getattr(triton, '__version__', '?')} at {getattr(triton, '__file__', '?')}) is "
            f"not the FlagTree build (registered backends: {sorted(backends)}). Install the "
            f"flagtree wheel into the environment that runs the kernels, after removing any other "
            f"Triton:\n  {FLAGTREE_INSTALL}\nIf a site-packages/triton without dist-info remains, "
            "delete it by path first: pip cannot remove it."
        )


_hcu_checked = False


def ensure_hcu_triton_once() -> None:
    """check_hcu_triton(), remembered once it passes (for the flagos_python route)."""
    global _hcu_checked
    if not _hcu_checked:
        check_hcu_triton()
        _hcu_checked = True


def warn_multicard_fine_grain(
    world_size: int, accelerator: str | None = None, env: Mapping[str, str] = os.environ
) -> bool:
    """Warns when a multi-card flagos group is created on DCU without
    HSA_FORCE_FINE_GRAIN_PCIE=1. Returns True when it warned. The distributed layer calls it."""
    if accelerator is None:
        try:
            from torch_fl import _build_config

            accelerator = getattr(_build_config, "ACCELERATOR", "")
        except ImportError:
            accelerator = ""
    if accelerator != "dcu" or world_size <= 1 or env.get("HSA_FORCE_FINE_GRAIN_PCIE") == "1":
        return False
    warnings.warn(
        f"a flagos process group of world size {world_size} is being created on DCU without "
        "HSA_FORCE_FINE_GRAIN_PCIE=1 (it is "
        f"{env.get('HSA_FORCE_FINE_GRAIN_PCIE', 'unset')!r}); RCCL needs it for multi-card "
        "throughput and stability (GPU VMFaults or device-side hangs otherwise). "
        "export HSA_FORCE_FINE_GRAIN_PCIE=1 before starting the ranks.",
        RuntimeWarning,
        stacklevel=2,
    )
    return True


def main(argv: list[str]) -> int:
    """python -m torch_fl.vendor.dcu --verify: full hash check of the staged bundle."""
    directory = bundle_dir()
    if argv[1:] != ["--verify"]:
        print("usage: python -m torch_fl.vendor.dcu --verify", file=sys.stderr)
        return 2
    problems = verify_hashes(directory)
    for problem in problems:
        print(problem)
    print("bundle OK" if not problems else f"{len(problems)} problem(s) in {directory}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
