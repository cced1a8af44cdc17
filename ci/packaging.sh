#!/usr/bin/env bash
# ci/packaging.sh: the packaging checks of issue 7, offline, from a clean state.
#
#   ci/packaging.sh [BUILD_DIR]        (default: ${TMPDIR:-/tmp}/tokenfeed-packaging, wiped first)
#
# Each check builds tokenfeed one way and runs a consumer that writes a tiny dataset and
# streams batches from it (tests/consumers/stream_batches.cpp, test_package/):
#   conan create, static and shared  the recipe built against Debian's packages through
#                                    ci/conan/ (wrapper recipes + [replace_requires]), each
#                                    running test_package/; no remote is used
#   find_package, static and shared  build, `cmake --install` into a prefix, then
#                                    tests/consumers/find-package against it, plus a
#                                    pkg-config build of the same program
#   find_package, build tree         the same consumer against the exported build tree
#   add_subdirectory                 tests/consumers/add-subdirectory embedding the tree
# Ends with "N passed, M failed"; the exit status is non-zero when anything failed.
#
# Environment: JOBS (default 2). Conan 2 is installed from PyPI into
# ${TOKENFEED_CONAN_VENV:-$HOME/.cache/tokenfeed/conan-venv} when no Conan 2 is on PATH;
# its cache (CONAN_HOME) lives under BUILD_DIR.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${TMPDIR:-/tmp}/tokenfeed-packaging}
jobs=${JOBS:-2}
started=$SECONDS

case "$build" in
  "$repo"|"$repo"/*) echo "packaging.sh: BUILD_DIR must be outside the source tree" >&2; exit 2 ;;
esac
rm -rf "$build"
mkdir -p "$build/logs"
build=$(cd "$build" && pwd)

# Every tree below compiles a copy of the checkout's files under BUILD_DIR, with ccache's
# base directory there: the compile lines then name the sources by paths relative to the
# build (../source/src/..., and inside Conan's cache ../../src/...), which are the same in
# every run, so a run from another checkout reuses what the last one compiled (five
# builds of the library: without the cache they were most of CI's packaging time).
src="$build/source"
mkdir -p "$src"
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # The working tree's files, committed or not (ignored ones, such as build trees, left out).
  (cd "$repo" && git ls-files -z --cached --others --exclude-standard |
    tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$src"
else
  (cd "$repo" && tar --exclude='./build*' -cf - .) | tar -xf - -C "$src"
fi
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache CCACHE_NOHASHDIR=1
  export CCACHE_BASEDIR="$build"
fi

passed=0
failed=0
summary=()

# check NAME FUNCTION [ARGS...]: runs one check with its output in logs/, records the result.
check() {
  local name=$1
  shift
  local log
  log="$build/logs/$(echo "$name" | tr -c 'A-Za-z0-9_\n' '-').log"
  local t0=$SECONDS
  echo "=== $name"
  # Not an `if` condition: errexit is ignored there, even when set inside the subshell.
  ( set -euo pipefail; "$@" ) >"$log" 2>&1
  local status=$?
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
    summary+=("PASS  $name ($((SECONDS - t0)) s)")
    echo "    passed in $((SECONDS - t0)) s"
  else
    failed=$((failed + 1))
    summary+=("FAIL  $name (log: $log)")
    echo "    FAILED (status $status) after $((SECONDS - t0)) s; last lines of $log:"
    tail -n 40 "$log" | sed 's/^/    | /'
  fi
  return "$status"
}

# skip NAME REASON: a check that could not run counts as failed.
skip() {
  failed=$((failed + 1))
  summary+=("FAIL  $1 (not run: $2)")
  echo "=== $1"
  echo "    FAILED: not run: $2"
}

# The version set once in CMakeLists.txt.
version=$(sed -n 's/^project(tokenfeed VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
if [ -z "$version" ]; then
  echo "packaging.sh: cannot read the project version from CMakeLists.txt" >&2
  exit 2
fi

cmake_configure() {  # SOURCE BINARY [ARGS...]
  local src=$1 bin=$2
  shift 2
  cmake -S "$src" -B "$bin" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
}

# Runs a consumer program and requires its success line.
run_consumer() {  # PROGRAM WORK_DIR
  "$1" "$2" | tee "$2.out"
  grep -q "^stream_batches: tokenfeed $version, " "$2.out"
}

# ---------------------------------------------------------------------------------------
# CMake: install, then find_package (static and shared), pkg-config, build tree.

install_and_consume() {  # KIND(static|shared)
  local kind=$1 shared=OFF tools=OFF
  [ "$kind" = shared ] && shared=ON
  [ "$kind" = static ] && tools=ON  # the command is built once, with the static install
  local bin="$build/$kind-build" prefix="$build/$kind-prefix"
  cmake_configure "$src" "$bin" -DBUILD_SHARED_LIBS=$shared -DTOKENFEED_BUILD_TESTS=OFF \
    -DTOKENFEED_BUILD_PERF=OFF -DTOKENFEED_BUILD_TOOLS=$tools -DCMAKE_INSTALL_PREFIX="$prefix"
  cmake --build "$bin" -j "$jobs"
  cmake --install "$bin"

  echo "--- installed files"
  (cd "$prefix" && find . -type f -o -type l | sort)
  local libdir
  libdir=$(dirname "$(find "$prefix" -name 'libtokenfeed.*' | head -n 1)")
  test -f "$prefix/include/tokenfeed/loader.hpp"
  test -f "$prefix/include/tokenfeed/export.hpp"
  test -f "$libdir/cmake/tokenfeed/tokenfeedConfig.cmake"
  test -f "$libdir/cmake/tokenfeed/tokenfeedConfigVersion.cmake"
  test -f "$libdir/pkgconfig/tokenfeed.pc"
  if [ "$kind" = static ]; then
    test -f "$libdir/libtokenfeed.a"
    echo "--- installed command"
    "$prefix/bin/tokenfeed" --version | tee "$build/cli-version.out"
    grep -qx "tokenfeed $version" "$build/cli-version.out"
  else
    echo "--- shared library: SONAME and exported symbols"
    # SOVERSION: MAJOR.MINOR while the major version is 0, then MAJOR (src/CMakeLists.txt).
    local soversion=${version%%.*}
    [ "$soversion" = 0 ] && soversion=${version%.*}
    readelf -d "$libdir/libtokenfeed.so" | tee "$build/readelf.out" | grep SONAME
    grep -qF "[libtokenfeed.so.$soversion]" "$build/readelf.out"
    nm -D -C --defined-only "$libdir/libtokenfeed.so" >"$build/exports.out"
    grep -q " T tokenfeed::version()" "$build/exports.out"
    grep -q " T tokenfeed::Loader::get_batch(" "$build/exports.out"
    grep -q "typeinfo for tokenfeed::Error" "$build/exports.out"
    # Internal classes stay hidden: some member functions of tokenfeed:: classes are
    # defined in the library (.symtab) but not exported (.dynsym). Members have external
    # linkage, so without hidden visibility every one of them would be exported.
    nm -C --defined-only "$libdir/libtokenfeed.so" | sed -n 's/^[0-9a-f]* [Tt] \(tokenfeed::.*\)$/\1/p' \
      | grep -v "(anonymous namespace)\|\[clone " | grep "^tokenfeed::[A-Za-z0-9_]*::" | sort -u >"$build/members.out"
    sed -n 's/^[0-9a-f]* T \(tokenfeed::.*\)$/\1/p' "$build/exports.out" | sort -u >"$build/exported.out"
    comm -23 "$build/members.out" "$build/exported.out" >"$build/hidden.out"
    echo "$(wc -l <"$build/hidden.out") of $(wc -l <"$build/members.out") member functions hidden, e.g.:"
    head -n 3 "$build/hidden.out"
    if [ ! -s "$build/hidden.out" ]; then
      echo "every member function is exported: hidden visibility is not in effect"
      return 1
    fi
  fi

  echo "--- find_package consumer"
  local consumer="$build/$kind-find-package"
  cmake_configure "$src/tests/consumers/find-package" "$consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DEXPECT_SHARED=$shared
  cmake --build "$consumer" -j "$jobs"
  run_consumer "$consumer/stream_batches" "$consumer/work"

  echo "--- pkg-config consumer"
  local pc_static=""
  [ "$kind" = static ] && pc_static="--static"
  local flags
  flags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs $pc_static tokenfeed)
  echo "pkg-config: $flags"
  # shellcheck disable=SC2086
  g++ -std=c++20 -O1 -DTOKENFEED_EXPECTED_VERSION="\"$version\"" \
    "$src/tests/consumers/stream_batches.cpp" $flags -Wl,-rpath,"$libdir" -o "$build/$kind-pkg-config-app"
  run_consumer "$build/$kind-pkg-config-app" "$build/$kind-pkg-config-work"
}

build_tree_consumer() {
  local consumer="$build/build-tree-find-package"
  test -f "$build/static-build/tokenfeedConfig.cmake"
  cmake_configure "$src/tests/consumers/find-package" "$consumer" -Dtokenfeed_DIR="$build/static-build" \
    | tee "$build/build-tree-configure.out"
  grep -qF "(STATIC_LIBRARY) from $build/static-build" "$build/build-tree-configure.out"
  cmake --build "$consumer" -j "$jobs"
  run_consumer "$consumer/stream_batches" "$consumer/work"
}

add_subdirectory_consumer() {
  local consumer="$build/add-subdirectory"
  cmake_configure "$src/tests/consumers/add-subdirectory" "$consumer" -DTOKENFEED_SOURCE_DIR="$src"
  cmake --build "$consumer" -j "$jobs"
  echo "--- built by the embedded tokenfeed"
  (cd "$consumer/tokenfeed" && find . -type f \( -name '*.a' -o -name '*.so*' -o -perm -u+x \) | sort) \
    | tee "$build/embedded-artifacts.out"
  grep -qx "./src/libtokenfeed.a" "$build/embedded-artifacts.out"
  if [ "$(wc -l <"$build/embedded-artifacts.out")" -ne 1 ]; then
    echo "the embedded tokenfeed built more than the library"
    return 1
  fi
  run_consumer "$consumer/stream_batches" "$consumer/work"
}

# ---------------------------------------------------------------------------------------
# Conan: offline, against the system's packages.

conan_bin=""
find_conan() {
  local candidate
  for candidate in "$(command -v conan || true)" "${TOKENFEED_CONAN_VENV:-$HOME/.cache/tokenfeed/conan-venv}/bin/conan"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" --version 2>/dev/null | grep -q "^Conan version 2\."; then
      conan_bin=$candidate
      return 0
    fi
  done
  return 1
}

conan_setup() {
  if ! find_conan; then
    local venv=${TOKENFEED_CONAN_VENV:-$HOME/.cache/tokenfeed/conan-venv}
    echo "installing Conan 2 from PyPI into $venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "conan>=2,<3"
    find_conan
  fi
  "$conan_bin" --version
  export CONAN_HOME="$build/conan-home"
  "$conan_bin" profile detect --force
  # No remote: everything resolves from the wrappers exported below.
  local remote
  for remote in $("$conan_bin" remote list --format=json |
                  python3 -c 'import json, sys; print(" ".join(r["name"] for r in json.load(sys.stdin)))'); do
    "$conan_bin" remote disable "$remote"
  done
  "$conan_bin" remote list
  local recipe
  "$conan_bin" export "$src/ci/conan/recipes/system-base"
  for recipe in "$src"/ci/conan/recipes/*-system; do
    "$conan_bin" export "$recipe"
  done
}

conan_create() {  # SHARED(True|False)
  local shared=$1
  "$conan_bin" create "$src" --no-remote \
    -pr:h "$src/ci/conan/profiles/debian-system" -pr:b default \
    -o "&:shared=$shared" \
    -c tools.build:jobs="$jobs" \
    -c tools.cmake.cmaketoolchain:generator=Ninja \
    -c tools.cmake.cmaketoolchain:user_presets= \
    -c tools.cmake.cmake_layout:test_folder="$build/conan-test_package-shared-$shared" \
    2>&1 | tee "$build/conan-create-$shared.out"  # Conan reports on stderr
  # The dependencies must be the wrappers, and test_package must have run.
  grep -q "onetbb/\[.*\]: onetbb-system/" "$build/conan-create-$shared.out"
  grep -q "^test_package: tokenfeed $version streamed " "$build/conan-create-$shared.out"
  "$conan_bin" list "tokenfeed/$version:*" --format=json >"$build/conan-list.json"
  python3 - "$build/conan-list.json" "$shared" <<'EOF'
import json, sys
data, shared = json.load(open(sys.argv[1])), sys.argv[2]
packages = [p for cache in data.values() for ref in cache.values()
            for rev in ref.get("revisions", {}).values() for p in rev.get("packages", {}).values()]
if not any(p.get("info", {}).get("options", {}).get("shared") == shared for p in packages):
    sys.exit(f"no tokenfeed package with shared={shared} in the cache")
EOF
}

echo "tokenfeed $version: packaging checks in $build (JOBS=$jobs)"
if check "conan: setup (Conan 2, private cache, no remote, wrapper recipes)" conan_setup && find_conan; then
  export CONAN_HOME="$build/conan-home"
  check "conan create, static, with test_package" conan_create False
  check "conan create, shared, with test_package" conan_create True
else
  skip "conan create, static, with test_package" "the Conan setup failed"
  skip "conan create, shared, with test_package" "the Conan setup failed"
fi
check "cmake install + find_package + pkg-config, static" install_and_consume static
check "cmake install + find_package + pkg-config, shared" install_and_consume shared
check "find_package from the build tree" build_tree_consumer
check "add_subdirectory" add_subdirectory_consumer

echo
printf '%s\n' "${summary[@]}"
echo "packaging checks took $((SECONDS - started)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
