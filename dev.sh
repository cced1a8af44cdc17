#!/usr/bin/env bash
# The developer entry point: installs what is missing (Debian packages), builds, and runs.
#
#   ./dev.sh sample            build the command (build-sample/), then stream batches from
#                              the shipped sample dataset
#   ./dev.sh test              build (warnings as errors) and run the whole test suite:
#                              the C++ suite (ctest), then the Python module's (pytest)
#   ./dev.sh sanitize thread   the suite under ThreadSanitizer (build-tsan/)
#   ./dev.sh sanitize address  the suite under AddressSanitizer + UBSan (build-asan/)
#   ./dev.sh deps [PACKAGE...] only install the build dependencies, and these Debian packages
#   ./dev.sh wheel [OUTDIR]    the self-contained manylinux wheel of the Python package, in
#                              OUTDIR (default dist/): ci/build_wheel.sh
set -euo pipefail
cd "$(dirname "$0")"

PACKAGES=(cmake g++ ninja-build ccache pkg-config python3 python3-venv python3-dev
          libtbb-dev libpugixml-dev libboost-dev doctest-dev libcli11-dev nlohmann-json3-dev
          libsentencepiece-dev sentencepiece zlib1g-dev libzstd-dev libssl-dev
          libpcre2-dev libutf8proc-dev)
JOBS=${JOBS:-2}

# install_deps [PACKAGE...]: installs what is missing of PACKAGES and the packages named.
# The one place this project installs Debian packages (python/run_tests.sh and perf/run.sh
# call `./dev.sh deps PACKAGE...`).
install_deps() {
  local missing=()
  for p in "${PACKAGES[@]}" "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "dev.sh: ${missing[*]} missing and no apt-get here to install them" >&2
    exit 1
  fi
  echo "dev.sh: installing ${missing[*]}" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# configure DIR [cmake args...]: the build tree, with the compiler cache when there is one.
configure() {
  local dir=$1
  shift
  if command -v ccache >/dev/null && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
    export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
  fi
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTOKENFEED_WARNINGS_AS_ERRORS=ON "$@" >/dev/null
}

# build DIR [cmake args...]: every target (the library, the command, tests, benchmarks, fuzzers).
build() {
  configure "$@"
  cmake --build "$1" -j "$JOBS"
}

run_tests() {
  local dir=$1
  ctest --test-dir "$dir" --output-on-failure -j "$JOBS" --timeout 600
}

case "${1:-}" in
  deps)
    shift
    install_deps "$@" ;;
  sample)
    install_deps
    # Only what streaming the sample needs, as fast as it builds: the library and the
    # command (not the tests, benchmarks and fuzzers of `test`), at -O1 without debug
    # information and with precompiled headers, in a tree of its own (build/ keeps the
    # test settings, which Clang's tools read).
    configure build-sample -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG" \
      -DTOKENFEED_PRECOMPILE_HEADERS=ON -DTOKENFEED_WARNINGS_AS_ERRORS=OFF -DTOKENFEED_BUILD_TESTS=OFF \
      -DTOKENFEED_BUILD_PERF=OFF
    cmake --build build-sample -j "$JOBS" --target tokenfeed_cli
    ./build-sample/tools/tokenfeed run --config data/sample/sample.xml --batches "${BATCHES:-500}" ;;
  test)
    install_deps
    build build
    run_tests build
    python/run_tests.sh ;;
  wheel)
    shift
    ci/build_wheel.sh "$@" ;;
  sanitize)
    install_deps
    # -O1: the sanitizers' recommended level; it builds about a third faster than -O2
    # (ASan: 297 s against 451 s on 2 cores), which keeps CI well under its time budget.
    sanitize_flags=(-DTOKENFEED_BUILD_PERF=OFF "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG")
    case "${2:-}" in
      thread) build build-tsan -DTOKENFEED_SANITIZE=thread "${sanitize_flags[@]}"; run_tests build-tsan ;;
      address) build build-asan -DTOKENFEED_SANITIZE=address "${sanitize_flags[@]}"; run_tests build-asan ;;
      *) echo "usage: ./dev.sh sanitize thread|address" >&2; exit 2 ;;
    esac ;;
  *)
    sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2 ;;
esac
