#!/usr/bin/env bash
# Builds the routing-table parser fuzzer with clang (libFuzzer + ASan/LSan + UBSan) and runs it.
#   tests/fuzz/run_conf_fuzz.sh [RUNS]     (default 100000 inputs)
# Seeds: the shipped tables. Exits non-zero on a crash, hang (>5 s per input), leak or UB.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
RUNS="${1:-100000}"
CXX="${CLANG_CXX:-clang++}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

"$CXX" -std=c++20 -g -O1 -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$ROOT/csrc" \
  "$ROOT/tests/fuzz/conf_parser_fuzz.cpp" "$ROOT/csrc/aten/routing/conf_parser.cpp" \
  -o "$WORK/conf_parser_fuzz"

mkdir -p "$WORK/corpus"
cp "$ROOT"/torch_fl/configs/*.conf "$WORK/corpus/"
printf 'include a.conf\0add.Tensor = cuda\nrelu=flagos_python # c\0include main.conf' \
  > "$WORK/corpus/cycle"
printf 'relu [numel >= 1_024, dtype = float16|int64] = cuda\nmm [numel < 9223372036854775807] = cpu_fallback\0' \
  > "$WORK/corpus/rules"
printf 'include sub/c.conf\0\0\0include ../b.conf\n_conj.default = cpu_fallback' \
  > "$WORK/corpus/nested"

ASAN_OPTIONS=detect_leaks=1 "$WORK/conf_parser_fuzz" "$WORK/corpus" \
  -runs="$RUNS" -max_len=2048 -timeout=5 -rss_limit_mb=2048 -seed=1 -print_final_stats=1 \
  2>&1 | tail -n 25
exit "${PIPESTATUS[0]}"
