#!/usr/bin/env bash
# The Python module's tests: builds and installs the package (pip install, through
# scikit-build-core and the same CMake project) into a venv, then runs pytest on
# python/tests. The last line printed is pytest's summary; the exit status is pytest's.
#
#   python/run_tests.sh [pytest arguments...]
#
# Environment:
#   PYTHON          the interpreter the venv is made from (default: python3 on PATH)
#   TOKENFEED_VENV  the venv, created when missing and reused after (default: build/py-venv)
#   TOKENFEED_TORCH 0 to skip installing torch from PyPI (the tests that need it then skip)
#   TOKENFEED_CLI   the `tokenfeed` command the dump-equality tests compare with; default:
#                   build/tools/tokenfeed (brought up to date when build/ is configured),
#                   else one built into build/py-cli
#
# The C++ dependencies (oneTBB, pugixml, ...) must be installed: ./dev.sh deps. The module
# builds incrementally in build/py-build (about 2-3 minutes on 2 cores the first time).
# Offline once the venv has its packages: pip then finds every requirement installed, and
# the package builds without build isolation from the venv's scikit-build-core and nanobind.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
JOBS=${JOBS:-2}
VENV=${TOKENFEED_VENV:-$ROOT/build/py-venv}
start=$SECONDS
log() { echo "[py-tests $((SECONDS - start))s] $*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV from ${PYTHON:-python3}"
  "${PYTHON:-python3}" -m venv "$VENV"
fi
PY="$VENV/bin/python"
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

log "test and build requirements"
pip_install numpy pytest "scikit-build-core>=0.10" "nanobind>=2.0"
if [ "${TOKENFEED_TORCH:-1}" != 0 ] && ! "$PY" -c "import torch" 2>/dev/null; then
  log "installing torch from PyPI (large; once per venv)"
  pip_install torch || log "torch did not install: the tests that need it will skip"
fi

log "building and installing the tokenfeed package (build/py-build)"
CMAKE_BUILD_PARALLEL_LEVEL=$JOBS pip_install --no-build-isolation --force-reinstall --no-deps \
  --config-settings=build-dir="$ROOT/build/py-build" "$ROOT"

if [ -z "${TOKENFEED_CLI:-}" ]; then
  if [ -f build/CMakeCache.txt ]; then
    log "bringing build/tools/tokenfeed up to date"
    cmake --build build --target tokenfeed_cli -j "$JOBS" >/dev/null
    TOKENFEED_CLI=$ROOT/build/tools/tokenfeed
  else
    log "building the tokenfeed command into build/py-cli"
    cmake -S . -B build/py-cli -DCMAKE_BUILD_TYPE=Release -DTOKENFEED_BUILD_TESTS=OFF \
      -DTOKENFEED_BUILD_PERF=OFF -DTOKENFEED_INSTALL=OFF >/dev/null
    cmake --build build/py-cli --target tokenfeed_cli -j "$JOBS" >/dev/null
    TOKENFEED_CLI=$ROOT/build/py-cli/tools/tokenfeed
  fi
fi
export TOKENFEED_CLI

log "pytest (torch: $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo absent))"
cd "$ROOT"
exec "$PY" -m pytest -q -rs -p no:cacheprovider python/tests "$@"
