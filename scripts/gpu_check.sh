#!/usr/bin/env bash
# Builds the cuda accelerator and runs the GPU-facing suites on an NVIDIA machine.
# Usage (repo root): bash scripts/gpu_check.sh [extra pytest paths...]
set -o pipefail
source "$(dirname "${BASH_SOURCE[0]}")/use_system_gcc.sh"
export PYTHONUNBUFFERED=1
out=${OUT:-/tmp/flagos-gpu}
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
if [ "${SKIP_BUILD:-0}" != 1 ] && ! FLAGOS_ACCELERATOR=cuda MAX_JOBS=${MAX_JOBS:-16} \
    python3 -m pip install --no-build-isolation --no-deps -e . >"$out/build.log" 2>&1; then
  tail -40 "$out/build.log"
  exit 1
fi
echo "== basic device check"
python3 - <<'PY' 2>&1 | tee "$out/basic_check.log"
import torch, torch_fl
print(f'PyTorch version: {torch.__version__}')
print(f'torch.version.cuda: {torch.version.cuda}')
print(f'flagos devices: {torch.flagos.device_count()}')
x = torch.randn(512, 512, device='flagos')
result = torch.mm(x, x)
print(f'mm output shape: {result.shape}')
print(f'mm matches .cuda(): {torch.allclose(result.cpu(), torch.mm(x.cpu().cuda(), x.cpu().cuda()).cpu())}')
PY
status=0
run() {
  echo "== pytest $*"
  python3 -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee -a "$out/pytest.log" | tail -25
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}
run tests/integration/test_cuda_accelerator.py tests/integration/test_math_bits_contract.py
run tests/integration/ops/ -m "main_ops and not flaggems and not flaggems_python"
run tests/integration/test_profiler_parity.py -m main_ops
run tests/integration/test_amp_contract.py -m amp
run tests/integration/test_allocator.py tests/integration/test_factory_ops.py
run tests/integration/test_routing_api.py tests/integration/test_routing_table.py \
  tests/integration/test_routing_python.py
run tests/unit  # the cpu-accelerator suite, on the cuda accelerator too
for extra in "$@"; do run "$extra"; done
exit $status
