#!/usr/bin/env bash
# Style of what changed: every C++ line added or changed since the commit that adopted
# .clang-format must be as clang-format writes it (.clang-format; clang-format-diff checks
# only those lines, so older code is reformatted when it is next touched, not all at once),
# and every C++ source file changed since then must pass the small clang-tidy check set
# of .clang-tidy.
#
#   ci/check_style.sh [BUILD_DIR]    BUILD_DIR holds compile_commands.json (default: build)
#   STYLE_BASE=REV ci/check_style.sh compare with REV instead
#   JOBS=N                           parallel clang-tidy processes (default 2)
#   TOKENFEED_TIDY_CACHE=DIR         where the files clang-tidy passed are recorded
#                                    (ci/clang_tidy_cached.py; default ~/.cache/tokenfeed/...)
#
# Exits 1 and prints the diff or the findings when a check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
JOBS=${JOBS:-2}
./dev.sh deps clang-format clang-tidy

base=${STYLE_BASE:-$(git log --diff-filter=A --format=%H -1 -- .clang-format)}
if [ -z "$base" ]; then
  echo "check_style: .clang-format is not committed yet; nothing to compare with" >&2
  exit 0
fi
mapfile -t changed < <(git diff --name-only --diff-filter=AM "$base" -- \
  'src/*.cpp' 'src/*.hpp' 'include/*.hpp' 'tools/*.cpp' 'tools/*.hpp' 'tests/*.cpp' 'tests/*.hpp' \
  'perf/*.cpp' 'perf/*.hpp' 'python/src/*.cpp' 'fuzz/*.cpp')
status=0

format_diff=""
if [ ${#changed[@]} -gt 0 ]; then
  format_diff=$(git diff -U0 --no-color "$base" -- "${changed[@]}" | clang-format-diff -p1 || true)
fi
if [ -n "$format_diff" ]; then
  echo "$format_diff"
  echo "check_style: the lines above are not formatted as .clang-format says; run" >&2
  echo "  git diff -U0 $base -- FILES | clang-format-diff -p1 -i" >&2
  status=1
fi

tidy_files=()
for f in "${changed[@]}"; do
  case "$f" in src/*.cpp | tools/*.cpp) tidy_files+=("$f") ;; esac
done
if [ ${#tidy_files[@]} -gt 0 ]; then
  if [ ! -f "$BUILD_DIR/compile_commands.json" ]; then
    echo "check_style: $BUILD_DIR/compile_commands.json is missing; build first (./dev.sh test)" >&2
    exit 1
  fi
  # JOBS clang-tidy processes at once, a few files each, skipping the files that passed
  # with the same contents, headers and flags before (ci/clang_tidy_cached.py: checking
  # every file took most of CI's style stage).
  if ! python3 ci/clang_tidy_cached.py "$BUILD_DIR" "$JOBS" "${tidy_files[@]}" 2>/dev/null; then
    echo "check_style: clang-tidy found the problems above (checks in .clang-tidy)" >&2
    status=1
  fi
fi
echo "check_style: ${#changed[@]} changed C++ files since ${base:0:12}: format $([ -z "$format_diff" ] && echo ok || echo FAILED), clang-tidy on ${#tidy_files[@]} files"
exit $status
