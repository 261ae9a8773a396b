#!/usr/bin/env bash
# Size rules on the GPU machine, in one call (about 6 minutes): install the carried wheels,
# build for cuda with FlagGems, run the size-rule, sweep and custom-operator tests, then
# torch_fl.tools.route_sweep (cuda against flagos_python, float32/float16/bfloat16) over the
# FlagGems table, writing $OUT/size_rules_cuda.conf and $OUT/size_rules_cuda.json.
# Usage (repo root): bash scripts/gpu_route_sweep.sh   SWEEP_ARGS="..." replaces the sweep's
# options (default: the whole catalog, 4**5 .. 4**12 elements); SKIP_BUILD=1.
# To ship the result: copy it to torch_fl/configs/ and include it from the table it extends
# (docs/routing.md).
set -o pipefail
cd "$(dirname "$0")/.."
source scripts/use_system_gcc.sh
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/flagos-route-sweep}
mkdir -p "$out"
shopt -s nullglob
wheels=(.whl/flag_gems-*.whl .whl/sqlalchemy-*.whl)
if [ "${#wheels[@]}" -lt 2 ]; then
  echo "missing wheels in .whl/ (need flag_gems-*.whl and sqlalchemy-*.whl)" | tee "$out/build.log"
  exit 1
fi
timeout 120 python3 -m pip install -q --no-deps "${wheels[@]}" .whl/expecttest-*.whl \
  >"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  FLAGOS_ACCELERATOR=cuda FLAGOS_BUILD_FLAGGEMS=1 MAX_JOBS=${MAX_JOBS:-16} timeout 300 \
    python3 -m pip install -q --no-build-isolation --no-deps -e . >>"$out/build.log" 2>&1 \
    || { tail -40 "$out/build.log"; exit 1; }
fi
status=0
echo "== $(date -u +%FT%TZ) tests" | tee "$out/tests.log"
timeout 240 python3 -m pytest -q -p no:cacheprovider -rfEs tests/integration/test_size_rules.py \
  tests/integration/test_route_sweep.py tests/integration/test_custom_ops.py 2>&1 \
  | tail -30 | tee -a "$out/tests.log" || status=1
echo "== $(date -u +%FT%TZ) sweep" | tee "$out/sweep.log"
# shellcheck disable=SC2086  # SWEEP_ARGS is a list of options
timeout 300 python3 -m torch_fl.tools.route_sweep --out "$out/size_rules_cuda.conf" \
  --json "$out/size_rules_cuda.json" ${SWEEP_ARGS:-} 2>&1 | tail -200 | tee -a "$out/sweep.log" \
  || status=1
grep -v '^#' "$out/size_rules_cuda.conf" 2>/dev/null | tee -a "$out/sweep.log"
exit $status
