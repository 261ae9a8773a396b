#!/usr/bin/env bash
# Everything GPU-facing in one call (one lease), each stage time-boxed:
#   1. build (cuda accelerator, FlagGems path) with the system GCC
#   2. in parallel on the one GPU: the GPU suites (scripts/gpu_check.sh plus attention, fast
#      kernels and comm tests); FlagGems (scripts/gpu_flaggems.sh: verify_routes, tests,
#      overhead); the compile suite
#   3. alone, for clean timings: dispatch overhead, GPT-2 end to end, FlagGems route overhead,
#      all_reduce bandwidth, compile speedup
# Logs are collected in /tmp/flagos-all and packed into $OUT/logs.tgz after every phase (the
# device tool returns at most 8 files); the FlagGems table and state are copied beside it.
# Usage (repo root): bash scripts/gpu_all.sh     TOTAL=seconds (default 570) bounds phase 3;
# PHASE3 picks its benchmarks (default "dispatch transformer e2e profile compile"; also "gems",
# the FlagGems route overhead, "comm", the all_reduce bandwidth, and "routecost", the parts of
# a routed call); EXTRA_SUITES adds pytest paths to phase 2's suites (SUITES_TIMEOUT, default
# 280 s, bounds them); E2E_ARGS replaces the
# end-to-end benchmark's arguments, GEMS_ARGS the FlagGems route overhead's.
# Needs the carried wheels in .whl/ (docs/installation/flaggems.md).
export PYTHONUNBUFFERED=1
real_out=${OUT:-/tmp/flagos-gpu}; mkdir -p "$real_out"
export OUT=/tmp/flagos-all; mkdir -p "$OUT"
pack() { tar czf "$real_out/logs.tgz" -C "$OUT" . 2>/dev/null; }
start=$(date +%s)
cap() {
  local left=$(( ${TOTAL:-570} - ($(date +%s) - start) ))
  [ "$left" -lt 1 ] && left=1
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
cd "$(dirname "$0")/.."
source scripts/use_system_gcc.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/build.log"
FLAGOS_ACCELERATOR=cuda FLAGOS_BUILD_FLAGGEMS=1 MAX_JOBS=16 timeout 240 python3 -m pip install \
  --no-build-isolation --no-deps -e . >>"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; pack; exit 1; }

# ---- phase 2
# shellcheck disable=SC2086 # EXTRA_SUITES is a list of paths
SKIP_BUILD=1 timeout ${SUITES_TIMEOUT:-280} bash scripts/gpu_check.sh \
  tests/integration/test_attention.py tests/integration/test_fast_path.py \
  tests/integration/test_comm_native_bridge.py tests/integration/test_comm_gpu.py \
  tests/integration/test_comm_backend.py tests/integration/test_tied_parameters.py \
  ${EXTRA_SUITES:-} \
  >"$OUT/suites.log" 2>&1 &
suites=$!
mkdir -p "$OUT/gems"
# Its table goes beside the logs: the suites running meanwhile read the shipped one.
OUT=$OUT/gems CONF=$OUT/gems/backends_flaggems.conf SKIP_BUILD=1 SKIP_BENCH=1 \
  VERIFY_BUDGET=${VERIFY_BUDGET:-150} timeout 250 bash scripts/gpu_flaggems.sh >"$OUT/gems.log" 2>&1 &
gems=$!
TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout 250 python3 -m pytest -q -p no:cacheprovider \
  tests/integration/test_compile.py -rs --tb=short >"$OUT/compile.log" 2>&1 &
comp=$!
status=0
wait $suites || status=1
grep -E "^== pytest|passed|failed|Segmentation" "$OUT/suites.log"; pack
wait $gems || status=1
tail -5 "$OUT/gems.log"
cp "$OUT/gems/backends_flaggems.conf" verify_routes.state.jsonl "$real_out/" 2>/dev/null; pack
wait $comp || status=1
tail -5 "$OUT/compile.log"; pack

# ---- phase 3
phase3=" ${PHASE3:-dispatch transformer e2e profile compile} "
bench() { # name, seconds, command...
  local name=$1 secs=$2; shift 2
  [[ $phase3 == *" $name "* ]] || return 0
  echo "== $(date -u +%FT%TZ) $name: $*" | tee -a "$OUT/bench.txt"
  timeout "$(cap "$secs")" "$@" 2>&1 | grep -v Warning | tee -a "$OUT/bench.txt"
  pack
}
bench routecost 30 python3 benchmarks/route_costs.py
bench dispatch 45 python3 benchmarks/dispatch_overhead.py --reps 40 --calls 20
bench transformer 60 python3 benchmarks/dispatch_overhead.py --suite transformer --reps 20 --calls 10
# shellcheck disable=SC2086 # E2E_ARGS is a list of arguments
bench e2e 100 python3 benchmarks/transformer_e2e.py ${E2E_ARGS:---rounds 2 --steps 6 --decode-tokens 16}
bench profile 90 python3 benchmarks/e2e_profile.py --steps 8 --profile-steps 2 --top 30 \
  --tree "${PROFILE_TREE:-aten::add,aten::arange,aten::embedding,aten::native_dropout,aten::tanh}"
# shellcheck disable=SC2086 # GEMS_ARGS is a list of arguments
bench gems 60 python3 benchmarks/flaggems_overhead.py ${GEMS_ARGS:---reps 20 --calls 40}
bench comm 60 python3 benchmarks/allreduce_bandwidth.py --rounds 15 --sizes 1M,16M,64M,256M
bench compile 80 env TORCHINDUCTOR_CACHE_DIR="$(mktemp -d)" python3 benchmarks/compile_speedup.py \
  --rounds 4 --iters 10
exit $status
