#!/usr/bin/env bash
# Everything GPU-facing in one call (one lease): build the cuda accelerator, the GPU suites
# (scripts/gpu_check.sh), the comm checks (scripts/comm_gpu_check.sh), the compile GPU tests
# and the benchmarks. Each stage is time-boxed. Usage (repo root): bash scripts/gpu_all.sh
set -o pipefail
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/flagos-gpu}
mkdir -p "$out"
status=0
timeout 240 bash scripts/gpu_check.sh || status=1
export SKIP_BUILD=1
BENCH_ARGS="--rounds 5" timeout 90 bash scripts/comm_gpu_check.sh || status=1
echo "== compile"
TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) timeout 150 python3 -m pytest -q -p no:cacheprovider tests/integration/test_compile.py -rs \
  2>&1 | tail -15 || status=1
{
  echo "== $(date -u +%FT%TZ) dispatch overhead"
  timeout 60 python3 benchmarks/dispatch_overhead.py --reps 60 --calls 20
  echo "== transformer e2e"
  timeout 100 python3 benchmarks/transformer_e2e.py --rounds 2 --steps 8 --decode-tokens 16
} 2>&1 | grep -v Warning | tee "$out/bench.txt"
exit $status
