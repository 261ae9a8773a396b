#!/usr/bin/env bash
# FlagGems on the GPU machine, in one call, each step time-boxed (total about 9 minutes):
#   1. install the carried wheels (.whl/flag_gems-*.whl, .whl/sqlalchemy-*.whl, optional
#      .whl/expecttest-*.whl for torch's OpInfo samples; no network)
#   2. build torch_fl for cuda with FlagGems (skipped with SKIP_BUILD=1)
#   3. print what the interpreter resolved: torch, triton, FlagGems and its vendor
#   4. verify_routes: writes torch_fl/configs/backends_flaggems.conf, or $CONF when set (+ report,
#      state); the tests of step 5 run with the table in torch_fl/configs either way
#   5. the flaggems tests (ops suite with the table, routed-op checks, conf consistency)
#   6. the overhead benchmark
# Usage (repo root): bash scripts/gpu_flaggems.sh
#   VERIFY_BUDGET=seconds (default 180)   SKIP_BUILD=1   RESUME=0 (ignore a previous state)
#   SKIP_BENCH=1 (leave the overhead benchmark to the caller, e.g. to run it with the GPU alone)
# A previous run's verify_routes.state.jsonl in the repo root (git-ignored: copy it back from
# $OUT and carry it) is resumed: operators already decided are not verified again.
# Output in $OUT (or /tmp/flagos-flaggems): build.log, verify.log, tests.log, bench.log,
# backends_flaggems.conf, verify_report.json, verify_routes.state.jsonl.
set -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/use_system_gcc.sh"
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/flagos-flaggems}
mkdir -p "$out"
status=0
conf=${CONF:-torch_fl/configs/backends_flaggems.conf}
state=verify_routes.state.jsonl

echo "== $(date -u +%FT%TZ) install carried wheels" | tee "$out/build.log"
shopt -s nullglob nocaseglob
wheels=(.whl/flag_gems-*.whl .whl/sqlalchemy-*.whl)
shopt -u nocaseglob
if [ "${#wheels[@]}" -lt 2 ]; then
  echo "missing wheels in .whl/ (need flag_gems-*.whl and sqlalchemy-*.whl): ${wheels[*]}" \
    | tee -a "$out/build.log"
  exit 1
fi
wheels+=(.whl/expecttest-*.whl)  # optional: torch's OpInfo samples need it
timeout 120 python3 -m pip install --no-deps "${wheels[@]}" >>"$out/build.log" 2>&1 \
  || { tail -20 "$out/build.log"; exit 1; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  echo "== $(date -u +%FT%TZ) build (cuda, FlagGems)" | tee -a "$out/build.log"
  if ! FLAGOS_ACCELERATOR=cuda FLAGOS_BUILD_FLAGGEMS=1 MAX_JOBS=${MAX_JOBS:-16} timeout 300 \
      python3 -m pip install --no-build-isolation --no-deps -e . >>"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    exit 1
  fi
fi
grep -E "BUILD_FLAGGEMS|ACCELERATOR|GEMS_VENDOR" torch_fl/_build_config.py | tee -a "$out/build.log"

echo "== $(date -u +%FT%TZ) versions" | tee "$out/verify.log"
timeout 90 python3 - <<'PY' 2>&1 | grep -v Warning | tee -a "$out/verify.log"
import torch, torch_fl, triton
from torch_fl import flaggems
gems = flaggems.load()  # sets GEMS_VENDOR from the build record unless set
cat = flaggems.catalog()
print("torch", torch.__version__, "| triton", triton.__version__, "| flag_gems",
      gems.__version__, "vendor", gems.vendor_name, "| device", torch.cuda.get_device_name(0))
print("catalog:", len(cat.entries), "overloads;", len(cat.skipped), "entries not offered")
print("table:", torch_fl.routing.active_table()["path"])
PY

echo "== $(date -u +%FT%TZ) verify_routes" | tee -a "$out/verify.log"
resume=()
if [ "${RESUME:-1}" != 0 ] && [ -s "$state" ]; then resume=(--resume); fi
budget=${VERIFY_BUDGET:-180}
deadline=$(( $(date +%s) + budget ))
for attempt in 1 2 3; do
  left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 20 ] || break
  timeout $(( left + 40 )) python3 -m torch_fl.tools.verify_routes --out "$conf" \
    --json "$out/verify_report.json" --state "$state" --time-budget "$left" "${resume[@]}" \
    2>&1 | grep -v Warning | tee -a "$out/verify.log"
  rc=${PIPESTATUS[0]}
  resume=(--resume)
  [ "$rc" -eq 3 ] || break  # 3: the device faulted on one operator; go on without it
  echo "verify_routes: restarting after a device fault (attempt $attempt)" | tee -a "$out/verify.log"
done
[ "${rc:-1}" -eq 0 ] || status=1
cp "$conf" "$out/backends_flaggems.conf" 2>/dev/null
cp "$state" "$out/$state" 2>/dev/null

echo "== $(date -u +%FT%TZ) flaggems tests" | tee "$out/tests.log"
timeout 110 python3 -m pytest -q -p no:cacheprovider -rs tests/integration/ops/ \
  -m "flaggems and main_ops" 2>&1 | tail -40 | tee -a "$out/tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
timeout 40 python3 -m pytest -q -p no:cacheprovider -rs tests/integration/test_flaggems_conf.py \
  2>&1 | tail -10 | tee -a "$out/tests.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

[ "${SKIP_BENCH:-0}" = 1 ] && exit $status
echo "== $(date -u +%FT%TZ) overhead benchmark" | tee "$out/bench.log"
timeout 60 python3 benchmarks/flaggems_overhead.py --reps 20 --calls 40 2>&1 | grep -v Warning \
  | tee -a "$out/bench.log"
exit $status
