#!/usr/bin/env bash
# Installs what torch_fl needs and builds it in place (editable install, GoogleTest suite on).
#
#   bash scripts/setup.sh
#
# For a fresh Debian or Ubuntu machine with Python 3.10+: system packages through apt-get (when
# run as root; otherwise it names what is missing), Python packages through pip into the Python
# on PATH (a virtual environment, if one is active). Safe to run again: it installs only what is
# missing and the rebuild is incremental.
#
# Environment:
#   PYTHON              interpreter to use (default: python3, else python)
#   TORCH_SPEC          pip requirement used when no torch 2.10-2.14 is installed
#                       (default: torch==2.13.0)
#   MAX_JOBS            parallel compile jobs (default 2)
#   FLAGOS_BUILD_TESTS  build the GoogleTest suite (default 1)
#   FLAGOS_ACCELERATOR  cpu, cuda or dcu; left unset, cpu on a machine without an NVIDIA GPU,
#                       otherwise what setup.py picks from the installed torch
#   other FLAGOS_* build switches pass through to setup.py (see README.md)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-$(command -v python3 || command -v python || true)}"
if [[ -z "$PYTHON" ]]; then
  echo "setup.sh: no python3 on PATH; install Python 3.10 or newer first" >&2
  exit 1
fi
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
export MAX_JOBS="${MAX_JOBS:-2}"
export FLAGOS_BUILD_TESTS="${FLAGOS_BUILD_TESTS:-1}"

say() { echo "==> $*"; }

py_ok=$("$PYTHON" -c 'import sys; print(int(sys.version_info >= (3, 10)))')
if [[ "$py_ok" != 1 ]]; then
  echo "setup.sh: $("$PYTHON" --version 2>&1) is too old; torch_fl needs Python 3.10 or newer" >&2
  exit 1
fi
say "python: $("$PYTHON" --version 2>&1) at $(command -v "$PYTHON")"

tests_on() {
  case "${FLAGOS_BUILD_TESTS,,}" in 1 | on | true | yes) return 0 ;; *) return 1 ;; esac
}

# ---- system packages -------------------------------------------------------------------------
python_headers=$("$PYTHON" -c \
  'import os, sysconfig; print(int(os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))))')

missing=()
command -v g++ > /dev/null || missing+=(g++)
command -v git > /dev/null || missing+=(git)
if tests_on && [[ ! -e /usr/include/gtest/gtest.h ]]; then
  missing+=(libgtest-dev)
fi
[[ "$python_headers" == 1 ]] || missing+=(python3-dev)
# cmake and ninja also come from pip below; the system ones are a convenience.
command -v cmake > /dev/null || missing+=(cmake)
command -v ninja > /dev/null || missing+=(ninja-build)

if ((${#missing[@]})); then
  if [[ "$(id -u)" == 0 ]] && command -v apt-get > /dev/null; then
    say "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" > /dev/null
  else
    echo "setup.sh: missing system packages: ${missing[*]}" >&2
    echo "  install them (sudo apt-get install -y ${missing[*]}) and run this script again" >&2
    exit 1
  fi
else
  say "system packages: all present"
fi

# ---- Python packages -------------------------------------------------------------------------
pip_args=(-q --disable-pip-version-check)
in_venv=$("$PYTHON" -c 'import sys; print(int(sys.prefix != sys.base_prefix))')
managed=$("$PYTHON" -c \
  'import os, sysconfig; print(int(os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED"))))')
if [[ "$managed" == 1 && "$in_venv" == 0 ]]; then
  echo "setup.sh: note: $PYTHON is the system's externally managed Python; installing into it" \
    "with --break-system-packages (use a virtual environment to avoid this)"
  pip_args+=(--break-system-packages)
fi
pip_install() { "$PYTHON" -m pip install "${pip_args[@]}" "$@"; }

torch_version=$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$PYTHON" -c 'import torch; print(torch.__version__)' 2> /dev/null || true)
if [[ -n "$torch_version" ]] && "$PYTHON" - "$torch_version" << 'EOF'; then
import sys
major, minor = (int(p) for p in sys.argv[1].split("+")[0].split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 10) and (major, minor) <= (2, 14) else 1)
EOF
  say "torch $torch_version is installed (2.10 to 2.14 are supported): keeping it"
else
  if [[ -n "$torch_version" ]]; then
    say "torch $torch_version is outside 2.10-2.14: installing $TORCH_SPEC"
  else
    say "installing $TORCH_SPEC"
  fi
  pip_install "$TORCH_SPEC"
fi

required=("setuptools>=64" wheel "cmake>=3.18" ninja pybind11 numpy pytest tqdm expecttest)
if "$PYTHON" - "${required[@]}" << 'EOF'; then
import re
import sys
from importlib.metadata import PackageNotFoundError, version

for spec in sys.argv[1:]:
    name, _, minimum = spec.partition(">=")
    try:
        have = version(name)
    except PackageNotFoundError:
        sys.exit(1)
    if minimum:
        want = tuple(int(p) for p in minimum.split("."))
        if tuple(int(p) for p in re.findall(r"\d+", have)[: len(want)]) < want:
            sys.exit(1)
EOF
  say "python packages: all present"
else
  say "pip install ${required[*]}"
  pip_install "${required[@]}"
fi

# Optional: the Hugging Face tests (tests/integration/test_huggingface.py) and the GPT-2
# benchmarks' checks run with these and are skipped without them, so a failed install is a
# note, not an error.
optional=(transformers accelerate)
if ! "$PYTHON" -c 'import transformers, accelerate' 2> /dev/null; then
  say "pip install ${optional[*]} (optional)"
  pip_install "${optional[@]}" || say "could not install ${optional[*]}: the tests that need them are skipped"
fi

# ---- accelerator default ---------------------------------------------------------------------
if [[ -z "${FLAGOS_ACCELERATOR:-}" ]] && ! (command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1); then
  export FLAGOS_ACCELERATOR=cpu
fi

# ---- build -----------------------------------------------------------------------------------
say "building torch_fl (accelerator ${FLAGOS_ACCELERATOR:-from torch}, MAX_JOBS=$MAX_JOBS," \
  "FLAGOS_BUILD_TESTS=$FLAGOS_BUILD_TESTS): a few minutes on 2 cores"
start=$SECONDS
pip_install --no-build-isolation -e .
"$PYTHON" - << 'EOF'
import runpy
record = runpy.run_path("torch_fl/_build_config.py")
print(f"==> built: accelerator {record['ACCELERATOR']}, torch {record['TORCH_FULL_VERSION']}, "
      f"build/{record['ACCELERATOR']}-torch{record['TORCH_VERSION']}")
EOF
say "build took $((SECONDS - start)) s; try: $PYTHON -m torch_fl.demo"
