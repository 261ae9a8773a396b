#!/usr/bin/env bash
# A/B of two source trees in one lease: builds both (cuda accelerator, in place, not installed)
# and runs a benchmark on each in alternating processes, so both see the same host. Host speed
# drifts between leases by more than most changes to a routed call, so a before/after that
# spans two leases measures the leases.
#
# Usage (repo root): BASE=<dir with the other tree's sources> bash scripts/gpu_ab.sh CMD...
#   CMD runs from this tree's root with PYTHONPATH set to the tree under test; "{}" in CMD is
#   replaced by that tree's root. ROUNDS (default 3) processes per tree, base first in odd
#   rounds and this tree first in even ones. Output lines are prefixed "base" or "head".
# The other tree, e.g.: mkdir -p probe/base && git archive <commit> | tar -x -C probe/base
# (untracked files travel to the GPU machine with the tree; name the folder in carry if git
# ignores it).
# Example: BASE=probe/base bash scripts/gpu_ab.sh python3 benchmarks/transformer_e2e.py \
#            --child pair:cuda --steps 8 --decode-tokens 16
set -uo pipefail
cd "$(dirname "$0")/.."
head_dir=$PWD
base_dir=$(cd "${BASE:?set BASE to the other tree}" && pwd)
source scripts/use_system_gcc.sh

build() { # dir
  (cd "$1" && FLAGOS_ACCELERATOR=cuda MAX_JOBS=${MAX_JOBS:-16} python3 setup.py build_ext \
    --inplace >"$1/ab-build.log" 2>&1) || { tail -30 "$1/ab-build.log"; exit 1; }
}
if [ -z "${SKIP_BUILD:-}" ]; then
  build "$base_dir" &
  build "$head_dir"
  wait $! || exit 1
fi

run() { # label dir
  local cmd=("${@:3}")
  cmd=("${cmd[@]//\{\}/$2}")
  PYTHONPATH=$2 TORCH_DEVICE_BACKEND_AUTOLOAD=0 "${cmd[@]}" 2>&1 | grep -v Warning |
    sed "s/^/$1 /"
}
for ((r = 1; r <= ${ROUNDS:-3}; r++)); do
  if ((r % 2)); then
    run base "$base_dir" "$@"
    run head "$head_dir" "$@"
  else
    run head "$head_dir" "$@"
    run base "$base_dir" "$@"
  fi
done
