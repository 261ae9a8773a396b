#!/usr/bin/env bash
# Builds the cuda accelerator and checks the `flagos` c10d backend on an NVIDIA machine:
# the native comm bridge (NCCL tier), the GPU comm tests, and the all_reduce bandwidth
# benchmark (flagos backend vs NCCL on cuda tensors). With 2+ GPUs it also runs the live
# two-process test. Usage (repo root): bash scripts/comm_gpu_check.sh
set -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/use_system_gcc.sh"
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/flagos-comm-gpu}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  if ! FLAGOS_ACCELERATOR=cuda MAX_JOBS=${MAX_JOBS:-16} python3 -m pip install \
      --no-build-isolation --no-deps -e . >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    exit 1
  fi
fi
status=0
echo "== pytest comm"
python3 -m pytest -v -p no:cacheprovider tests/integration/test_comm_native_bridge.py \
    tests/integration/test_comm_gpu.py tests/integration/test_comm_backend.py \
    2>&1 | tee "$out/pytest_comm.log" | tail -40
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  echo "== live, world size 2"
  python3 tests/manual/test_flagos_dist_live.py --world-size 2 2>&1 | tee "$out/live.log" | tail -8
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
fi
echo "== all_reduce bandwidth, world size 1"
python3 benchmarks/allreduce_bandwidth.py ${BENCH_ARGS:-} --json "$out/allreduce_ws1.json" \
    2>&1 | grep -v Warning | tee "$out/allreduce_ws1.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit $status
