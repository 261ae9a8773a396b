#!/usr/bin/env bash
# Everything GPU-facing in one call (one lease), most important first, each stage time-boxed:
# build + GPU suites (scripts/gpu_check.sh), dispatch overhead, comm checks
# (scripts/comm_gpu_check.sh), the compile suite, the end-to-end benchmark.
# Usage (repo root): bash scripts/gpu_all.sh        Logs: $OUT (or /tmp/flagos-gpu)
set -o pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/flagos-gpu}
mkdir -p "$out"
status=0
timeout 170 bash scripts/gpu_check.sh || status=1
export SKIP_BUILD=1
echo "== $(date -u +%FT%TZ) dispatch overhead" | tee "$out/bench.txt"
timeout 45 python3 benchmarks/dispatch_overhead.py --reps 40 --calls 20 2>&1 | grep -v Warning \
  | tee -a "$out/bench.txt"
BENCH_ARGS="--rounds 3" timeout 60 bash scripts/comm_gpu_check.sh || status=1
echo "== compile"
TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout 100 python3 -m pytest -q -p no:cacheprovider \
  tests/integration/test_compile.py -rs 2>&1 | tee "$out/compile.log" | tail -12
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
echo "== transformer e2e" | tee -a "$out/bench.txt"
timeout 90 python3 benchmarks/transformer_e2e.py --rounds 2 --steps 6 --decode-tokens 16 2>&1 \
  | grep -v Warning | tee -a "$out/bench.txt"
exit $status
