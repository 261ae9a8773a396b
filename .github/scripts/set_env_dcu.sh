#!/usr/bin/env bash
# Environment of the DCU CI stages (build and test), also usable for a local install:
#
#   source .github/scripts/set_env_dcu.sh
#
# 1. sources DTK's env.sh (ROCM_PATH, default /opt/dtk);
# 2. probes the host driver mount for the hyhal stack and prepends its lib/ to LD_LIBRARY_PATH
#    (libhydmi.so lives there);
# 3. exports the runtime variables multi-card and FlagTree runs need;
# 4. replaces any Triton with FlagTree's hcu build and installs the pinned FlagGems.
#
# Variables: ROCM_PATH; FLAGOS_HYHAL_DIRS (search list, default "/usr/local/hyhal /opt/hyhal");
# FLAGOS_SET_ENV_SKIP_PIP=1 skips step 4; FLAGOS_SET_ENV_DRY_RUN=1 prints step 4's commands
# instead of running them. When $GITHUB_ENV is set the exports are also written there so later
# workflow steps see them.

FLAGTREE_SPEC="flagtree===0.6.2a1+hcu3.6"
FLAGOS_PYPI_INDEX="https://resource.flagos.net/repository/flagos-pypi-hosted/simple"
FLAGGEMS_SPEC="git+https://github.1485827954.workers.dev/FlagOpen/FlagGems.git@e7b4a865fce6d85861ee91a6aca56564ef9acf7d"

_flagos_export() {  # name value: export here and for later CI steps
  export "$1=$2"
  if [[ -n "${GITHUB_ENV:-}" ]]; then
    echo "$1=$2" >>"$GITHUB_ENV"
  fi
}

_flagos_pip() {
  if [[ "${FLAGOS_SET_ENV_DRY_RUN:-0}" == "1" ]]; then
    echo "+ python3 -m pip $*"
  else
    python3 -m pip "$@"
  fi
}

_flagos_set_env_dcu() {
  local rocm="${ROCM_PATH:-/opt/dtk}"
  if [[ ! -f "$rocm/env.sh" ]]; then
    echo "set_env_dcu.sh: $rocm/env.sh not found; set ROCM_PATH to the DTK root" >&2
    return 1
  fi
  # shellcheck disable=SC1091
  source "$rocm/env.sh"
  _flagos_export ROCM_PATH "${ROCM_PATH:-$rocm}"

  local dir found=""
  for dir in ${FLAGOS_HYHAL_DIRS:-/usr/local/hyhal /opt/hyhal}; do
    if [[ -e "$dir/lib/libhydmi.so" ]]; then
      found="$dir/lib"
      break
    fi
  done
  if [[ -n "$found" ]]; then
    _flagos_export LD_LIBRARY_PATH "$found${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "set_env_dcu.sh: hyhal driver libraries: $found"
  else
    echo "set_env_dcu.sh: warning: no libhydmi.so under ${FLAGOS_HYHAL_DIRS:-/usr/local/hyhal /opt/hyhal} (lib/); DTK's device libraries will not load" >&2
  fi
  _flagos_export LD_LIBRARY_PATH "${LD_LIBRARY_PATH:-}"

  _flagos_export HSA_FORCE_FINE_GRAIN_PCIE 1  # RCCL: multi-card throughput and stability
  _flagos_export FLAGTREE_BACKEND hcu
  _flagos_export FLAGOS_USE_FLAGTREE 1

  if [[ "${FLAGOS_SET_ENV_SKIP_PIP:-0}" == "1" ]]; then
    return 0
  fi
  # DTK's own Triton has no hcu entry point: remove every Triton (pip removes one copy a call).
  local i
  for i in 1 2 3 4 5; do
    if [[ "${FLAGOS_SET_ENV_DRY_RUN:-0}" != "1" ]] && ! python3 -m pip show triton >/dev/null 2>&1; then
      break
    fi
    _flagos_pip uninstall -y triton
    if [[ "${FLAGOS_SET_ENV_DRY_RUN:-0}" == "1" ]]; then break; fi
    echo "set_env_dcu.sh: triton uninstall pass $i"
  done
  # A copy without dist-info cannot be removed by pip; delete it by path.
  if [[ "${FLAGOS_SET_ENV_DRY_RUN:-0}" != "1" ]]; then
    local site
    site="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    if [[ -d "$site/triton" ]] && ! compgen -G "$site/triton-*.dist-info" >/dev/null; then
      echo "set_env_dcu.sh: removing $site/triton (no dist-info)"
      rm -rf "$site/triton"
    fi
  fi
  _flagos_pip install --no-deps "$FLAGTREE_SPEC" --index-url="$FLAGOS_PYPI_INDEX" || return 1
  _flagos_pip install --no-deps "$FLAGGEMS_SPEC" || return 1
  _flagos_pip install packaging PyYAML==6.0.1 sqlalchemy==2.0.48 'numpy<2' || return 1
  if [[ "${FLAGOS_SET_ENV_DRY_RUN:-0}" != "1" ]]; then
    python3 -c 'import triton, triton.backends; b = sorted(triton.backends.backends); assert "hcu" in b, b; print("triton", triton.__version__, b)' || return 1
  fi
}

_flagos_set_env_dcu
_flagos_status=$?
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  exit "$_flagos_status"
fi
# shellcheck disable=SC2317
return "$_flagos_status" 2>/dev/null || true
