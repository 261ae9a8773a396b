#!/usr/bin/env bash
# Runs the test suite of a built tree (run scripts/setup.sh first).
#
#   bash scripts/test.sh
#
# Stages, each run even when an earlier one failed:
#   1. ctest: the GoogleTest suite of the C++ core, in the build directory under build/
#   2. pytest on tests/ except tests/unit (integration, manual, ... whatever exists)
#   3. the per-file unit runner .github/scripts/run_unit_tests.py (or plain pytest on tests/unit
#      when the runner is absent)
# pytest's exit status 5 (no tests collected) is a warning, any other non-zero status a failure.
# The last line says PASS or FAIL; the exit status is 0 only on PASS.
#
# Environment: PYTHON (default python3, else python); CTEST_JOBS (default 2);
# FLAGOS_SKIP_CPP_TESTS=1 skips stage 1 (for a build made with FLAGOS_BUILD_TESTS=0).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-$(command -v python3 || command -v python)}"

passed=()
failed=()
warned=()
start=$SECONDS

banner() { printf '\n==> %s\n' "$*"; }

# record NAME STATUS [ALLOW_NO_TESTS]
record() {
  local name=$1 status=$2 allow_empty=${3:-0}
  if [[ "$status" == 0 ]]; then
    passed+=("$name")
  elif [[ "$allow_empty" == 1 && "$status" == 5 ]]; then
    warned+=("$name (no tests collected)")
    echo "warning: $name collected no tests"
  else
    failed+=("$name (exit $status)")
  fi
}

# ---- 1. C++ tests ----------------------------------------------------------------------------
if [[ "${FLAGOS_SKIP_CPP_TESTS:-0}" == 1 ]]; then
  warned+=("ctest (skipped: FLAGOS_SKIP_CPP_TESTS=1)")
elif [[ ! -f torch_fl/_build_config.py ]]; then
  banner "ctest"
  echo "torch_fl is not built (no torch_fl/_build_config.py): run bash scripts/setup.sh"
  failed+=("ctest (not built)")
else
  build_dir=$("$PYTHON" -c "import runpy; r = runpy.run_path('torch_fl/_build_config.py'); print('build/%s-torch%s' % (r['ACCELERATOR'], r['TORCH_VERSION']))")
  banner "ctest in $build_dir"
  if [[ ! -x "$build_dir/tests/cpp/torch_fl_cpp_tests" ]]; then
    echo "the GoogleTest suite is not built in $build_dir: run FLAGOS_BUILD_TESTS=1 bash scripts/setup.sh"
    echo "(or set FLAGOS_SKIP_CPP_TESTS=1 to skip it)"
    failed+=("ctest (suite not built)")
  else
    (cd "$build_dir" && ctest --output-on-failure --no-tests=error -j "${CTEST_JOBS:-2}")
    record ctest $?
  fi
fi

# ---- 2. pytest: everything but tests/unit ----------------------------------------------------
banner "pytest tests --ignore=tests/unit"
if [[ -d tests ]]; then
  "$PYTHON" -m pytest tests --ignore=tests/unit -q
  record pytest $? 1
else
  warned+=("pytest (no tests/ directory)")
fi

# ---- 3. unit tests, one interpreter per file ------------------------------------------------
if [[ -f .github/scripts/run_unit_tests.py ]]; then
  banner "unit tests: .github/scripts/run_unit_tests.py --timeout 300"
  "$PYTHON" .github/scripts/run_unit_tests.py --timeout 300
  record "unit runner" $?
elif [[ -n "$(find tests/unit -name 'test_*.py' -print -quit 2> /dev/null)" ]]; then
  banner "unit tests: pytest tests/unit (no .github/scripts/run_unit_tests.py in this tree)"
  "$PYTHON" -m pytest tests/unit -q
  record "unit pytest" $? 1
else
  warned+=("unit tests (none in this tree)")
fi

# ---- summary ---------------------------------------------------------------------------------
echo
echo "==> summary after $((SECONDS - start)) s"
for s in "${passed[@]}"; do echo "    passed:  $s"; done
for s in "${warned[@]}"; do echo "    warning: $s"; done
for s in "${failed[@]}"; do echo "    FAILED:  $s"; done
if ((${#failed[@]})); then
  echo "FAIL: ${#failed[@]} test stage(s) failed"
  exit 1
fi
note=""
((${#warned[@]})) && note=", ${#warned[@]} warning(s)"
echo "PASS: ${#passed[@]} test stage(s) passed, none failed$note"
