#!/usr/bin/env bash
# The Python module's tests: builds and installs the package (pip install, through
# scikit-build-core and the same CMake project) into a venv, then runs pytest on
# python/tests. The last line printed is pytest's summary; the exit status is pytest's.
#
#   python/run_tests.sh [pytest arguments...]
#
# Torch (the tests of the DLPack/torch path, torch.save, and examples/train_tiny_gpt.py):
#   TOKENFEED_TORCH=debian  (the default) Debian's python3-torch (1.13, CPU only, some
#                           hundreds of MB with its libraries) and libopenblas0 (the BLAS
#                           libtorch recommends), installed with apt-get when missing
#                           (through sudo when not root). The venv is made from Debian's
#                           /usr/bin/python3 with --system-site-packages, the only way it
#                           sees Debian's dist-packages (a pyenv or other python3 cannot).
#   TOKENFEED_TORCH=pypi    torch from PyPI, installed into the venv (its default wheel is
#                           the CUDA build: several GB with nvidia-* and triton).
#   TOKENFEED_TORCH=0       no torch: the tests that need it are skipped.
# With debian or pypi, torch is required: when it cannot be installed or imported, the run
# fails (and so do the tests that need it), it does not skip them.
#
# Other environment:
#   TOKENFEED_VENV      the venv, created when missing and reused after (default:
#                       build/py-venv-debian, or build/py-venv-pypi with TOKENFEED_TORCH=pypi);
#                       a default venv made another way is recreated, a given one is an error
#   PYTHON              the interpreter of a pypi venv (default /usr/bin/python3); a debian
#                       venv is always made from /usr/bin/python3
#   TOKENFEED_PY_BUILD  the module's CMake build dir (default build-py-debian or
#                       build-py-pypi, beside build/); it builds incrementally. When build/ is
#                       configured (./dev.sh test builds it first), the default dir is built
#                       with build/'s compiler, build type and warnings: at the same depth
#                       from the sources, the library's and the command's objects then compile
#                       with the same lines as build/'s, ccache hands them over, and only the
#                       module's own files compile. The settings are kept in the dir
#                       (tokenfeed-pip-settings) for ci/build_wheel.sh reusing it.
#   TOKENFEED_CLI       the `tokenfeed` command the dump-equality tests compare with; default:
#                       build/tools/tokenfeed (brought up to date when build/ is configured),
#                       else one built into build/py-cli
#   JOBS                build parallelism (default 2)
#
# The C++ dependencies (oneTBB, pugixml, ...) come from ./dev.sh deps, which this script runs
# with TOKENFEED_TORCH=debian (adding Debian's torch); with pypi, run it first. Offline once
# the venv has its packages: pip then finds every requirement installed, and the package
# builds without build isolation from the venv's scikit-build-core and nanobind.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
JOBS=${JOBS:-2}
TORCH=${TOKENFEED_TORCH:-debian}
start=$SECONDS
log() { echo "[py-tests $((SECONDS - start))s] $*" >&2; }
die() { log "error: $*"; exit 1; }

case "$TORCH" in
  debian | 0) flavour=debian ;;
  pypi) flavour=pypi ;;
  *) die "TOKENFEED_TORCH must be debian (the default), pypi or 0, not '$TORCH'" ;;
esac
DEFAULT_VENV=$ROOT/build/py-venv-$flavour
VENV=${TOKENFEED_VENV:-$DEFAULT_VENV}
BUILD_DIR=${TOKENFEED_PY_BUILD:-$ROOT/build-py-$flavour}
DEBIAN_PYTHON=/usr/bin/python3

if [ "$flavour" = debian ]; then
  PYTHON=$DEBIAN_PYTHON
  packages=(python3-venv python3-dev)
  # libopenblas0: what libtorch recommends; without it torch uses the reference BLAS, far slower.
  [ "$TORCH" = debian ] && packages+=(python3-torch libopenblas0)
  "$ROOT/dev.sh" deps "${packages[@]}"  # with the C++ build dependencies, when missing
else
  PYTHON=${PYTHON:-$DEBIAN_PYTHON}
fi

# The venv must be the kind this mode needs: from Debian's python with its dist-packages
# visible, or (pypi) without them, so that pip installs PyPI's torch instead of finding
# Debian's.
venv_matches() {
  local cfg=$VENV/pyvenv.cfg want_system=false
  [ "$flavour" = debian ] && want_system=true
  [ -x "$VENV/bin/python" ] && [ -f "$cfg" ] || return 1
  grep -Eq "^include-system-site-packages *= *$want_system\$" "$cfg" || return 1
  if [ "$flavour" = debian ]; then
    [ "$("$VENV/bin/python" -c 'import sys; print(sys.base_prefix)')" = /usr ] || return 1
  fi
}
if [ -e "$VENV" ] && ! venv_matches; then
  [ "$VENV" = "$DEFAULT_VENV" ] || die "$VENV is not a $flavour venv (see the top of $0); remove it or set TOKENFEED_VENV to another path"
  log "recreating $VENV (it was not made for TOKENFEED_TORCH=$TORCH)"
  rm -rf "$VENV"
fi
if [ ! -x "$VENV/bin/python" ]; then
  venv_args=()
  [ "$flavour" = debian ] && venv_args=(--system-site-packages)
  log "creating $VENV from $PYTHON ${venv_args[*]:-}"
  "$PYTHON" -m venv "${venv_args[@]}" "$VENV"
fi
PY="$VENV/bin/python"
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

log "test and build requirements"
# numpy: Debian's python3-numpy when it is there (torch 1.13 is built against it; pip
# leaves an installed numpy alone), else PyPI's.
pip_install numpy pytest "scikit-build-core>=0.10,<2" "nanobind>=2.0,<4" "lizard>=1.17"
# The Hugging Face preparation (the package's [hf] extra: tokenizers, jinja2, pyarrow) and
# transformers, which its tests compare against; pip is skipped once they import.
if ! "$PY" -c "import tokenizers, jinja2, pyarrow, transformers" 2>/dev/null; then
  log "installing tokenizers, jinja2, pyarrow, transformers (once per venv)"
  # pyarrow below 21: later wheels refuse NumPy 1.x, which Debian's torch 1.13 is built against.
  pip_install "tokenizers>=0.15" "jinja2>=3.1.6" "pyarrow>=12,<21" "transformers>=4.45"
fi
# ray: the tests of tokenfeed.ray (prepare-text's tasks as Ray tasks on a local cluster,
# ray.init(num_cpus=2)); pip is skipped once it imports. Not fatal: without it those tests
# are skipped, saying so.
if ! "$PY" -c "import ray" 2>/dev/null; then
  log "installing ray (once per venv)"
  pip_install "ray>=2.9" || log "ray did not install from PyPI: the tokenfeed.ray tests are skipped"
fi
case "$TORCH" in
  pypi)
    if ! "$PY" -c "import torch" 2>/dev/null; then
      log "installing torch from PyPI (large; once per venv)"
      pip_install torch || die "torch did not install from PyPI (TOKENFEED_TORCH=pypi); TOKENFEED_TORCH=0 skips the torch tests"
    fi ;;
esac
if [ "$TORCH" != 0 ]; then
  "$PY" -c "import torch" || die "torch does not import in $VENV (TOKENFEED_TORCH=$TORCH)"
  export TOKENFEED_TEST_TORCH=required
else
  export TOKENFEED_TEST_TORCH=skip
fi

# build/'s objects shared through ccache (TOKENFEED_PY_BUILD above).
settings_file=$BUILD_DIR/tokenfeed-pip-settings
if [ -z "${TOKENFEED_PY_BUILD:-}" ] && [ -f "$ROOT/build/CMakeCache.txt" ]; then
  cached() { sed -n "s/^$1:[A-Z]*=//p" "$ROOT/build/CMakeCache.txt"; }
  mkdir -p "$BUILD_DIR"
  printf '%s\n' "--config-settings=cmake.build-type=$(cached CMAKE_BUILD_TYPE)" \
    "--config-settings=cmake.define.CMAKE_CXX_COMPILER=$(cached CMAKE_CXX_COMPILER)" \
    "--config-settings=cmake.define.TOKENFEED_WARNINGS_AS_ERRORS=$(cached TOKENFEED_WARNINGS_AS_ERRORS)" \
    >"$settings_file"
fi
shared_settings=()
[ -f "$settings_file" ] && mapfile -t shared_settings <"$settings_file"
log "building and installing the tokenfeed package ($BUILD_DIR)"
CMAKE_BUILD_PARALLEL_LEVEL=$JOBS pip_install --no-build-isolation --force-reinstall --no-deps \
  --config-settings=build-dir="$BUILD_DIR" "${shared_settings[@]}" "$ROOT"

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

if [ "$TORCH" = 0 ]; then
  log "pytest (TOKENFEED_TORCH=0: the torch tests are skipped)"
else
  log "pytest (torch $("$PY" -c 'import torch, os; print(torch.__version__, "from", os.path.dirname(torch.__file__))'))"
fi
cd "$ROOT"
exec "$PY" -m pytest -q -rs -p no:cacheprovider python/tests "$@"
