#!/usr/bin/env bash
# Clang's thread-safety analysis over the library: every translation unit of src/ (and of
# python/src/ when the Python module's build is there) is parsed by clang++ with
# -Wthread-safety as an error, with the flags the build used (BUILD_DIR's
# compile_commands.json), and nothing is compiled. So a member annotated
# TF_GUARDED_BY(mutex) (src/util/thread_annotations.hpp) that is read or written without its
# mutex, or a TF_REQUIRES function called without it, fails CI, whatever compiler builds.
#
#   ci/check_thread_safety.sh [BUILD_DIR]   BUILD_DIR holds compile_commands.json (default: build)
#   JOBS=N                                  parallel clang++ processes (default 2)
#
# First it proves that it bites: ci/thread_safety_planted.cpp, which reads a guarded member
# and calls a TF_REQUIRES function without the mutex, must be refused with both named.
# Exits 1 and prints clang's findings when a check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
BUILD_DIR=${BUILD_DIR%/}
./dev.sh deps clang
start=$SECONDS

if [ ! -f "$BUILD_DIR/compile_commands.json" ]; then
  echo "check_thread_safety: $BUILD_DIR/compile_commands.json is missing; build first (./dev.sh test)" >&2
  exit 1
fi
databases=("$BUILD_DIR/compile_commands.json")
# The Python module's build (python/run_tests.sh, run by ./dev.sh test) when it is there.
if [ -f "$BUILD_DIR-py-debian/compile_commands.json" ]; then
  databases+=("$BUILD_DIR-py-debian/compile_commands.json")
fi

python3 - "$PWD" "${JOBS:-2}" "${databases[@]}" <<'EOF'
import concurrent.futures
import json
import pathlib
import re
import shlex
import subprocess
import sys

root = pathlib.Path(sys.argv[1]).resolve()
jobs = int(sys.argv[2])
FLAGS = ["-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option"]


def clang_command(entry):
    """The build's command for one file, as clang++ parsing it with the analysis only."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    while args and pathlib.Path(args[0]).name in ("ccache", "sccache"):
        args = args[1:]
    out, skip = ["clang++"], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif a in ("-c", "-MD", "-MMD") or a.startswith("-W") or a.startswith("-o"):
            continue
        else:
            out.append(a)
    return out + FLAGS


def run(command, cwd):
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    return result.returncode, result.stderr


# The planted case: refused, both faults named.
planted = root / "ci" / "thread_safety_planted.cpp"
code, err = run(["clang++", "-std=c++20", f"-I{root / 'src'}", str(planted)] + FLAGS, root)
if code == 0 or len(re.findall(r"requires holding mutex", err)) < 2:
    print(err)
    print("check_thread_safety: the planted case (ci/thread_safety_planted.cpp) was not refused: "
          "the analysis does not bite", file=sys.stderr)
    sys.exit(1)

units = {}
for database in sys.argv[3:]:
    for entry in json.loads(pathlib.Path(database).read_text()):
        path = pathlib.Path(entry["directory"], entry["file"]).resolve()
        rel = path.relative_to(root).as_posix() if path.is_relative_to(root) else ""
        if rel.startswith(("src/", "python/src/")):
            units.setdefault(rel, (clang_command(entry), entry["directory"]))

failed = []
with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
    results = pool.map(lambda item: (item[0], *run(*item[1])), sorted(units.items()))
    for rel, code, err in results:
        if code != 0:
            failed.append(rel)
            print(err, end="")
print(f"check_thread_safety: {len(units)} translation units, {len(failed)} refused "
      f"(clang++ -Wthread-safety; the planted case refused)")
sys.exit(1 if failed else 0)
EOF
echo "check_thread_safety: $((SECONDS - start)) s"
