#!/usr/bin/env python3
"""Proves that ci/check_layout.py bites: each violation below is planted in a temporary
copy of what the check reads (its own `files_read`), and the check must fail naming the
planted file and the rule; the unchanged copy must pass. Run by ctest (`layout_rules_planted`).

    ci/check_layout_test.py [REPO_ROOT]
"""
from __future__ import annotations

import copy
import pathlib
import shutil
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import check_layout  # noqa: E402


def write(path: pathlib.Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def symlink(path: pathlib.Path, target: str) -> None:
    path.symlink_to(target)


# (what is planted, how, the file the report must name, the rule it must name). Each runs
# in a fresh copy (`r` is the copy's root), in a new file, so that the plants do not depend
# on what the tree's files hold today.
PLANTS = [
    ("an angle-bracket include of a folder sampling/ may not include",
     lambda r: write(r / "src/sampling/planted.cpp", "#include <pipeline/batch_pool.hpp>\n"),
     "src/sampling/planted.cpp", "folder-deps"),
    ("an internal header in angle brackets, even an allowed one",
     lambda r: write(r / "src/sampling/planted.cpp", "#include <util/error.hpp>\n"),
     "src/sampling/planted.cpp", "internal-quotes"),
    ("a quoted include of a folder sampling/ may not include",
     lambda r: write(r / "src/sampling/planted.cpp", '#include "pipeline/batch_pool.hpp"\n'),
     "src/sampling/planted.cpp", "folder-deps"),
    ("'..' through an allowed folder",
     lambda r: write(r / "src/sampling/planted.cpp", '#include "util/../pipeline/batch_pool.hpp"\n'),
     "src/sampling/planted.cpp", "include-path"),
    ("'..' through a public header",
     lambda r: write(r / "src/sampling/planted.cpp", '#include "tokenfeed/../../src/pipeline/batch_pool.hpp"\n'),
     "src/sampling/planted.cpp", "include-path"),
    ("a computed include",
     lambda r: write(r / "src/sampling/planted.cpp", '#define POOL "pipeline/batch_pool.hpp"\n#include POOL\n'),
     "src/sampling/planted.cpp", "include-path"),
    ("an include split over a continued line",
     lambda r: write(r / "src/sampling/planted.cpp", '#include \\\n  "pipeline/batch_pool.hpp"\n'),
     "src/sampling/planted.cpp", "folder-deps"),
    ("the digraph of '#'",
     lambda r: write(r / "src/sampling/planted.cpp", "%:include <pipeline/batch_pool.hpp>\n"),
     "src/sampling/planted.cpp", "folder-deps"),
    ("a comment between '#' and 'include'",
     lambda r: write(r / "src/sampling/planted.cpp", '#/* hidden */include "pipeline/batch_pool.hpp"\n'),
     "src/sampling/planted.cpp", "folder-deps"),
    ("a byte-order mark before the first include",
     lambda r: write(r / "src/sampling/planted.cpp", '\ufeff#include "pipeline/batch_pool.hpp"\n'),
     "src/sampling/planted.cpp", "folder-deps"),
    ("#include_next",
     lambda r: write(r / "src/sampling/planted.cpp", "#include_next <pipeline/batch_pool.hpp>\n"),
     "src/sampling/planted.cpp", "folder-deps"),
    ("a third-party header in a public header",
     lambda r: write(r / "include/tokenfeed/planted.hpp", "#include <pugixml.hpp>\n"),
     "include/tokenfeed/planted.hpp", "public-header"),
    ("a POSIX header in a public header",
     lambda r: write(r / "include/tokenfeed/planted.hpp", "#include <unistd.h>\n"),
     "include/tokenfeed/planted.hpp", "public-header"),
    ("an internal header in a public header",
     lambda r: write(r / "include/tokenfeed/planted.hpp", '#include "util/error.hpp"\n'),
     "include/tokenfeed/planted.hpp", "public-header"),
    ("<pthread.h> in a thread-free folder",
     lambda r: write(r / "src/io/planted.cpp", "#include <pthread.h>\n"),
     "src/io/planted.cpp", "no-threads"),
    ("<thread> in a thread-free folder",
     lambda r: write(r / "src/tokenizer/planted.cpp", "#include <thread>\n"),
     "src/tokenizer/planted.cpp", "no-threads"),
    ("<execution> (parallel algorithms) in a thread-free folder",
     lambda r: write(r / "src/dataset/planted.cpp", "#include <execution>\n"),
     "src/dataset/planted.cpp", "no-threads"),
    ("oneTBB in a thread-free folder",
     lambda r: write(r / "src/chat/planted.cpp", "#include <oneapi/tbb/parallel_for.h>\n"),
     "src/chat/planted.cpp", "no-threads"),
    ("std::thread used without an include of its own",
     lambda r: write(r / "src/util/planted.cpp", "static void start() { std::thread([] {}).detach(); }\n"),
     "src/util/planted.cpp", "no-threads"),
    ("a file read in sampling/",
     lambda r: write(r / "src/sampling/planted.cpp", "#include <fstream>\n"),
     "src/sampling/planted.cpp", "no-files"),
    ("measure/ in the library core",
     lambda r: write(r / "src/modes/planted.cpp", '#include "measure/measure.hpp"\n'),
     "src/modes/planted.cpp", "measure-core"),
    ("tools/ from the library, in angle brackets",
     lambda r: write(r / "src/loader/planted.cpp", "#include <tools/commands.hpp>\n"),
     "src/loader/planted.cpp", "library-users"),
    ("tools/ from the library",
     lambda r: write(r / "src/loader/planted.cpp", '#include "tools/commands.hpp"\n'),
     "src/loader/planted.cpp", "library-users"),
    ("a folder without a rule",
     lambda r: write(r / "src/newstage/thing.cpp", "int thing() { return 1; }\n"),
     "src/newstage/", "folder-rule"),
    ("a source file directly in src/",
     lambda r: write(r / "src/loose.cpp", "int loose() { return 1; }\n"),
     "src/loose.cpp", "loose-file"),
    ("a file of a kind the check does not know in src/",
     lambda r: write(r / "src/sampling/rows.txt", "#include <pipeline/batch_pool.hpp>\n"),
     "src/sampling/rows.txt", "unknown-file"),
    ("a quoted include of such a file",
     lambda r: write(r / "src/sampling/planted.cpp", '#include "sampling/rows.txt"\n'),
     "src/sampling/planted.cpp", "include-path"),
    ("a symbolic link in src/",
     lambda r: symlink(r / "src/sampling/pool.hpp", "../pipeline/batch_pool.hpp"),
     "src/sampling/pool.hpp", "unknown-file"),
    ("a file in include/ outside tokenfeed/",
     lambda r: write(r / "include/extra.hpp", "#include <pugixml.hpp>\n"),
     "include/extra.hpp", "unknown-file"),
    ("an internal header in tools/ that USER_INTERNAL does not list",
     lambda r: write(r / "tools/planted.cpp", '#include "pipeline/batch_pool.hpp"\n'),
     "tools/planted.cpp", "user-internal"),
    ("an internal header in perf/ that USER_INTERNAL does not list",
     lambda r: write(r / "perf/planted.cpp", '#include "audit/audit_log.hpp"\n'),
     "perf/planted.cpp", "user-internal"),
    ("an internal header in python/src/ that USER_INTERNAL does not list",
     lambda r: write(r / "python/src/planted.cpp", '#include "pipeline/split_pipeline.hpp"\n'),
     "python/src/planted.cpp", "user-internal"),
    ("a local include of a file that is not there",
     lambda r: write(r / "tools/planted.cpp", '#include "internal_bits.hpp"\n'),
     "tools/planted.cpp", "include-path"),
    ("an allowance that is no longer used",
     lambda r: check_layout.USER_INTERNAL.update({"tools/cmd_gone.cpp": {"io/npy.hpp"}}),
     "tools/cmd_gone.cpp", "stale-allowance"),
]
# Every extension the old check skipped: a file with it, in sampling/, that includes the
# pipeline, must be refused.
for suffix in (".ipp", ".inl", ".tpp", ".cc", ".cxx", ".h", ".hh", ".hxx", ".inc"):
    PLANTS.append((f"a {suffix} file",
                   lambda r, s=suffix: write(r / f"src/sampling/detail{s}", '#include "pipeline/batch_pool.hpp"\n'),
                   f"src/sampling/detail{suffix}", "folder-deps"))
for suffix in (".ipp", ".h"):
    PLANTS.append((f"a {suffix} public header",
                   lambda r, s=suffix: write(r / f"include/tokenfeed/detail{s}", "#include <pugixml.hpp>\n"),
                   f"include/tokenfeed/detail{suffix}", "public-header"))
    PLANTS.append((f"a {suffix} file in tools/",
                   lambda r, s=suffix: write(r / f"tools/detail{s}", '#include "pipeline/batch_pool.hpp"\n'),
                   f"tools/detail{suffix}", "user-internal"))


def copy_tree(root: pathlib.Path, to: pathlib.Path) -> None:
    """Only what the check reads."""
    for path in check_layout.files_read(root):
        target = to / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def run_cli(root: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HERE / "check_layout.py"), str(root)], capture_output=True, text=True)


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else HERE.parent
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        pristine = pathlib.Path(tmp) / "pristine"
        copy_tree(root, pristine)
        clean = run_cli(pristine)
        if clean.returncode != 0:
            failures.append(f"the unchanged tree fails the check:\n{clean.stdout}")
        for number, (what, plant, file, rule) in enumerate(PLANTS):
            tree = pathlib.Path(tmp) / f"plant{number}"
            shutil.copytree(pristine, tree, symlinks=True)
            allowances = copy.deepcopy(check_layout.USER_INTERNAL)
            plant(tree)
            problems = check_layout.check(tree)
            check_layout.USER_INTERNAL = allowances
            named = [p for p in problems if p.startswith(file) and p.endswith(f"[{rule}]")]
            if not named:
                failures.append(f"{what}: expected a report on {file} naming [{rule}], got:\n  "
                                + ("\n  ".join(problems) or "(nothing)"))
            elif number == 0:
                # The command itself fails on a planted tree, and says where and why.
                result = run_cli(tree)
                if result.returncode != 1 or named[0] not in result.stdout:
                    failures.append(f"{what}: the command exited {result.returncode} with:\n{result.stdout}")
            shutil.rmtree(tree)
    for f in failures:
        print(f"FAIL: {f}")
    print(f"check_layout_test: {len(PLANTS)} planted violations, {len(PLANTS) - len(failures)} refused "
          f"with the file and the rule named; the unchanged tree {'passes' if clean.returncode == 0 else 'FAILS'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
