#!/usr/bin/env bash
# Runs tests/integration/test_opinfo_sweep.py in parallel shards (one process each), then
# prints the failures of all shards and their summaries. For a GPU machine with many cores;
# run scripts/gpu_check.sh (or the build) first. Works on the cpu accelerator too.
#
#   SHARDS=8 DTYPES=float32 TIMEOUT=300 bash scripts/gpu_sweep.sh [extra pytest args...]
#
# Environment: SHARDS (default 8), DTYPES (forward dtypes, default float32; empty for the
# file's own five), TIMEOUT per shard in seconds (default 300), OUT (log folder, default
# /tmp/flagos-sweep).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
shards=${SHARDS:-8}
out=${OUT:-/tmp/flagos-sweep}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
[[ -n "${DTYPES-float32}" ]] && export FLAGOS_OPINFO_DTYPES="${DTYPES-float32}"
for ((i = 0; i < shards; i++)); do
  (FLAGOS_OPINFO_SHARD="$i/$shards" timeout "${TIMEOUT:-300}" python3 -m pytest -q \
    -p no:cacheprovider -p no:warnings -rfEs tests/integration/test_opinfo_sweep.py "$@" \
    > "$out/shard$i.log" 2>&1
  echo "shard $i exit $?" >> "$out/shard$i.log") &
done
wait
status=0
grep -hE "^(FAILED|ERROR)" "$out"/shard*.log | sort
grep -hE "^E  .*(Error|sample)" "$out"/shard*.log | cut -c1-250 | sort -u | head -40
for ((i = 0; i < shards; i++)); do
  tail -n 2 "$out/shard$i.log" | tr '\n' ' '
  echo
  grep -qE "shard $i exit (0|5)$" "$out/shard$i.log" || status=1  # 5: nothing selected
done
exit $status
