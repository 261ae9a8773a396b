#!/usr/bin/env bash
# Syntax-checks the C++ sources against another torch's headers (no link):
#   scripts/check_torch_headers.sh <dir holding torch/include> <minor> [accelerator]
# e.g. unzip a torch 2.10 wheel's torch/include/* into /tmp/inc-2.10 and run
#   scripts/check_torch_headers.sh /tmp/inc-2.10 10 cpu
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
inc=$1/torch/include
minor=$2
accel=${3:-cpu}
upper=$(echo "$accel" | tr a-z A-Z)
py_inc=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
flags=(-std=c++20 -fsyntax-only -D_GLIBCXX_USE_CXX11_ABI=1 -DFLAGOS_TORCH_MAJOR=2
  -DFLAGOS_TORCH_MINOR="$minor" -DFLAGOS_ACCELERATOR_"$upper"=1 -DFLAGOS_ACCELERATOR_NAME="\"$accel\""
  -I"$root/csrc" -isystem "$inc" -isystem "$inc/torch/csrc/api/include" -isystem "$py_inc"
  -isystem /usr/local/cuda/include)
[ "$accel" = cpu ] || flags+=(-DFLAGOS_BUILD_BOXING=1)
status=0
for f in "$root"/csrc/runtime/*.cpp "$root"/csrc/runtime/"$accel"/*.cpp "$root"/csrc/aten/*.cpp \
  "$root"/csrc/aten/*/*.cpp "$root"/csrc/comm/*.cpp "$root"/csrc/python/*.cpp; do
  [ -e "$f" ] || continue
  g++ "${flags[@]}" "$f" || { echo "FAILED: $f"; status=1; }
done
# The NCCL bridge needs nccl.h and the CUDA library headers torch's CUDA context includes:
# NCCL_INCLUDE_DIR (e.g. nvidia/nccl/include of the nvidia-nccl-cu13 wheel) and, where the CUDA
# toolkit lacks them, CUDA_LIBS_INCLUDE_DIR (e.g. nvidia/cu13/include of nvidia-cusparse).
if [ "$accel" != cpu ] && [ -n "${NCCL_INCLUDE_DIR:-}" ]; then
  bridge=("${flags[@]}" -DUSE_C10D_NCCL=1 -DUSE_CUDA=1 -isystem "$NCCL_INCLUDE_DIR")
  [ -z "${CUDA_LIBS_INCLUDE_DIR:-}" ] || bridge+=(-isystem "$CUDA_LIBS_INCLUDE_DIR")
  f=$root/csrc/comm/nccl_bridge/flagos_nccl.cpp
  g++ "${bridge[@]}" "$f" || { echo "FAILED: $f"; status=1; }
fi
exit $status
