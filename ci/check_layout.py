#!/usr/bin/env python3
"""Checks the dependency rules of docs/ARCHITECTURE.md over the #include lines of src/,
include/tokenfeed/, tools/, perf/ and python/src/. Run by ctest (the `layout_rules` test),
so the README's test command enforces them.

    ci/check_layout.py [REPO_ROOT]

Prints one line per broken rule (file:line: what is included and which rule forbids it)
and exits 1 when there is any; prints a summary and exits 0 otherwise.
"""
from __future__ import annotations

import pathlib
import re
import sys

# Which folders of src/ each folder may include from (its own is always allowed). Public
# headers ("tokenfeed/...") may be included from anywhere. A folder not listed here is an
# error, so that a new folder comes with its rule.
MAY_INCLUDE = {
    "util": set(),
    "io": {"util"},
    "dataset": {"util", "io"},
    "sampling": {"util"},
    "pipeline": {"util", "io"},
    "modes": {"util", "io", "dataset", "sampling", "pipeline"},
    "loader": {"util", "io", "dataset", "sampling", "modes", "pipeline", "chat", "tokenizer"},
    # RL batches: prompts read like a dataset split (resolving the config as the loader
    # does), scored groups packed into pooled batches.
    "rl": {"util", "io", "dataset", "sampling", "modes", "pipeline", "loader"},
    "tokenizer": {"util", "io"},
    "chat": {"util", "io", "tokenizer"},
    "prepare": {"util", "io", "dataset", "tokenizer", "chat"},
    # Measurement helpers for tools/, perf/ and python/: not part of the library's core.
    "measure": {"util"},
    # Dataset inspection (`tokenfeed inspect`, Python's tokenfeed.inspect()): a front beside
    # the loader that reports each refusal instead of stopping at the first, through the
    # rules' own functions; its percentiles are measure/'s. Nothing of the core includes it.
    "inspect": {"util", "io", "dataset", "sampling", "modes", "loader", "measure"},
}

# Folders whose code starts no thread, waits on none and uses neither TBB nor the ring: it
# may be thread-safe (a mutex, an atomic), but concurrency is the pipeline's business.
NO_THREADS = {"util", "io", "dataset", "sampling", "tokenizer", "chat"}
THREAD_HEADERS = re.compile(
    r"^(thread|condition_variable|future|stop_token|semaphore|latch|barrier|"
    r"tbb/.*|oneapi/tbb.*|boost/lockfree/.*)$")
# sampling/ is arithmetic over ids: it reads no files.
NO_FILES = {"sampling"}
FILE_HEADERS = re.compile(r"^(fstream|cstdio|stdio\.h|filesystem|fcntl\.h|unistd\.h|sys/mman\.h|sys/stat\.h)$")
# The library core, which nothing of it may include outside of itself.
CORE = set(MAY_INCLUDE) - {"measure", "inspect"}

# tools/ (the `tokenfeed` command) may include the public API, its own files, and the two
# units of src/ made for it: inspect/ and measure/. Anything else of src/ is an exception
# listed here with its reason, so that the command's reach into the library stays visible.
TOOLS_MAY_INCLUDE = {"inspect", "measure"}
TOOLS_EXCEPTIONS = {
    ("cmd_prepare.cpp", "prepare/prepare.hpp"):
        "prepare's options and entry point are not public API (the library's users prepare through the command "
        "or Python)",
    ("cmd_prepare_text.cpp", "prepare/prepare_text.hpp"):
        "prepare-text's options and entry point, likewise not public API",
    ("cmd_dump.cpp", "io/npy.hpp"):
        "dump writes .npy files with the library's own header writer, so that its files match what the loader reads",
    ("cmd_dump.cpp", "io/regular_file.hpp"):
        "dump reads a --state file as the loader reads outside files (regular files only, never a FIFO)",
}

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE = re.compile(r"\.(c|cc|cpp|h|hpp)$")


def includes(path: pathlib.Path):
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        m = INCLUDE.match(line)
        if m:
            yield number, m.group(1), m.group(2)


def check(root: pathlib.Path) -> list[str]:
    problems: list[str] = []
    src = root / "src"
    folders = {p.name for p in src.iterdir() if p.is_dir()}

    def report(path: pathlib.Path, number: int, what: str) -> None:
        problems.append(f"{path.relative_to(root)}:{number}: {what}")

    for folder in sorted(folders - set(MAY_INCLUDE)):
        problems.append(f"src/{folder}/: a folder with no rule in ci/check_layout.py (MAY_INCLUDE); "
                        "add one and describe it in docs/ARCHITECTURE.md")
    for path in sorted(src.glob("*")):
        if path.is_file() and SOURCE.search(path.name):
            problems.append(f"{path.relative_to(root)}: a source file directly in src/; it belongs in a folder")

    for path in sorted(src.rglob("*")):
        if not (path.is_file() and SOURCE.search(path.name)):
            continue
        folder = path.relative_to(src).parts[0]
        allowed = MAY_INCLUDE.get(folder, set()) | {folder}
        for number, kind, name in includes(path):
            if kind == '"':
                if name.startswith("tokenfeed/"):
                    continue
                head = name.split("/")[0]
                if "/" not in name or head not in folders:
                    report(path, number, f'"{name}" is not a path from src/ (write "folder/file.hpp")')
                elif head not in allowed:
                    report(path, number, f'"{name}": src/{folder}/ may include only '
                                         f'{", ".join(sorted(allowed))} (and public headers)')
            else:
                if folder in NO_THREADS and THREAD_HEADERS.match(name):
                    report(path, number, f"<{name}>: src/{folder}/ starts and waits on no threads and uses "
                                         "neither TBB nor the ring (that is src/pipeline/'s business)")
                if folder in NO_FILES and FILE_HEADERS.match(name):
                    report(path, number, f"<{name}>: src/{folder}/ reads no files")

    # Public headers: only the standard library and other public headers.
    for path in sorted((root / "include" / "tokenfeed").rglob("*")):
        if not (path.is_file() and SOURCE.search(path.name)):
            continue
        for number, kind, name in includes(path):
            if kind == '"' and not name.startswith("tokenfeed/"):
                report(path, number, f'"{name}": a public header includes only public headers')
            if kind == "<" and "/" in name:
                report(path, number, f"<{name}>: a public header includes no third-party header "
                                     "(users would need it to compile)")

    # Users of the library (tools, perf, python) may include anything of src/, but the
    # library never includes them; measure/ is theirs, never the core's.
    for path in sorted(src.rglob("*")):
        if not (path.is_file() and SOURCE.search(path.name)):
            continue
        folder = path.relative_to(src).parts[0]
        for number, kind, name in includes(path):
            if kind == '"' and (name.startswith(("tools/", "python/", "perf/", "../")) or name == "commands.hpp"):
                report(path, number, f'"{name}": the library includes nothing from tools/, perf/ or python/')
            if folder in CORE and kind == '"' and name.startswith("measure/"):
                report(path, number, f'"{name}": measure/ serves tools, perf and python, not the library core')

    # tools/: the public API, its own files, inspect/ and measure/, and the listed exceptions.
    tools = root / "tools"
    for path in sorted(tools.rglob("*")) if tools.is_dir() else []:
        if not (path.is_file() and SOURCE.search(path.name)):
            continue
        for number, kind, name in includes(path):
            head = name.split("/")[0]
            if kind != '"' or name.startswith("tokenfeed/") or head in TOOLS_MAY_INCLUDE:
                continue
            if "/" not in name and (path.parent / name).is_file():
                continue  # the command's own header
            if (path.relative_to(tools).as_posix(), name) in TOOLS_EXCEPTIONS:
                continue
            report(path, number, f'"{name}": tools/ may include only the public API (tokenfeed/...), '
                                 f'{", ".join(f + "/" for f in sorted(TOOLS_MAY_INCLUDE))} and its own files; '
                                 "an exception needs its reason in TOOLS_EXCEPTIONS")
    for (file, name) in sorted(TOOLS_EXCEPTIONS):
        if (tools / file).is_file() and not any(included == name for _, _, included in includes(tools / file)):
            problems.append(f"tools/{file}: no longer includes \"{name}\"; remove its exception from TOOLS_EXCEPTIONS")
    return problems


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"layout rules: {len(problems)} broken (see docs/ARCHITECTURE.md, 'Dependency rules')")
        return 1
    count = sum(1 for p in (root / "src").rglob("*") if p.is_file() and SOURCE.search(p.name))
    print(f"layout rules: {count} files in src/ checked, all rules hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
