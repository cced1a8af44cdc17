#!/usr/bin/env python3
"""Checks the dependency rules of docs/ARCHITECTURE.md over the #include lines of src/,
include/ and of the library's users: tools/, perf/ and python/src/. Run by ctest (the
`layout_rules` test), so the README's test command enforces them, and by .ci/run before
the build; `ci/check_layout_test.py` plants each violation and expects it to be refused.

    ci/check_layout.py [REPO_ROOT]

Prints one line per broken rule (file:line: what is included, which rule forbids it, and
the rule's name in brackets) and exits 1 when there is any; prints a summary and exits 0
otherwise.

What it reads, so that there is no file it does not see:
- every file under src/ and include/: each must be a C++ file (any extension a compiler or
  an #include takes: CPP_SUFFIXES) or a build file (NOT_CPP); anything else, and any
  symbolic link, is refused, since it would be included unchecked;
- every C++ file under tools/, perf/ and python/src/ (a quoted #include must name a file
  with one of CPP_SUFFIXES, so a file it reaches is one that is scanned);
- every #include, #include_next and #import (`%:include` too, and with comments around
  the `#`), in either form: "folder/file.hpp" and
  <folder/file.hpp> are the same header to a compiler given `-I src`, so both are held to
  the folder rules (and an internal header must be written with quotes); a computed
  include (a macro) or a path with `.` or `..` in it cannot be checked and is refused.
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
    # The XML configuration and its key table; the launch facts its checks name.
    "config": {"util", "io", "sampling", "launch"},
    # Where the process stands on its node: launcher ranks, CPU share, memory bound, layout.
    "launch": {"util", "pipeline"},
    # The audit log: writer, the loader's records, reader.
    "audit": {"util", "io"},
    # One dataset's splits as the loader opens them: settled options, fingerprint, the split
    # set, each split per sampling layout, the resume state, weight changes.
    "splits": {"util", "io", "dataset", "sampling", "modes", "pipeline", "launch", "audit"},
    # A mixture: a split set over single datasets' splits.
    "mixture": {"util", "io", "dataset", "sampling", "modes", "pipeline", "launch", "splits"},
    # The facade: the public Loader over one dataset's or a mixture's split set.
    "loader": {"util", "io", "launch", "splits", "mixture"},
    # RL batches: prompts read like a dataset split (resolving the config as the loader
    # does), scored groups packed into pooled batches.
    "rl": {"util", "io", "dataset", "sampling", "modes", "pipeline", "splits"},
    "tokenizer": {"util", "io"},
    "chat": {"util", "io", "tokenizer"},
    "prepare": {"util", "io", "dataset", "tokenizer", "chat"},
    # Measurement helpers for tools/, perf/ and python/: not part of the library's core.
    "measure": {"util"},
    # Dataset inspection (`tokenfeed inspect`, Python's tokenfeed.inspect()): a front beside
    # the loader that reports each refusal instead of stopping at the first, through the
    # rules' own functions; its percentiles are measure/'s. Nothing of the core includes it.
    "inspect": {"util", "io", "dataset", "sampling", "modes", "launch", "splits", "mixture", "measure"},
}

# Folders whose code starts no thread, waits on none and uses neither TBB nor the ring: it
# may be thread-safe (a mutex, an atomic: <mutex>, <shared_mutex>, <atomic>), but
# concurrency is the pipeline's business. The headers that start or wait on threads, in
# the standard library, POSIX, C11, OpenMP, oneTBB and Boost:
NO_THREADS = {"util", "io", "dataset", "sampling", "tokenizer", "chat", "config", "audit"}
THREAD_HEADERS = re.compile(
    r"^(thread|condition_variable|future|stop_token|semaphore|latch|barrier|execution|"
    r"pthread\.h|threads\.h|omp\.h|"
    r"tbb/.*|oneapi/tbb\.h|oneapi/tbb/.*|boost/lockfree/.*|boost/thread\.hpp|boost/thread/.*|"
    r"boost/fiber/.*|boost/asio\.hpp|boost/asio/.*)$")
# The same, by name in the code (what a header of another folder or a third-party header
# would bring in without an #include line here).
THREAD_NAMES = re.compile(
    r"\bstd::(thread|jthread|async|condition_variable(_any)?|counting_semaphore|binary_semaphore|latch|"
    r"barrier|stop_source|this_thread)\b|\bpthread_(create|join|detach|cond_\w+)\b|\b(oneapi::)?tbb::|"
    r"\bboost::lockfree::|\bboost::thread\b")
# sampling/ is arithmetic over ids: it reads no files.
NO_FILES = {"sampling"}
FILE_HEADERS = re.compile(
    r"^(fstream|cstdio|stdio\.h|filesystem|fcntl\.h|unistd\.h|dirent\.h|sys/mman\.h|sys/stat\.h|sys/uio\.h|"
    r"aio\.h|zlib\.h|zstd\.h)$")
FILE_NAMES = re.compile(r"\bstd::(i|o)?fstream\b|\bstd::filesystem\b|\b(std::)?fopen\b|\bmmap\b")
# The library core, which nothing of it may include outside of itself.
CORE = set(MAY_INCLUDE) - {"measure", "inspect"}

# The library's users: the command, the benchmarks and the Python module. Each may include
# the public API ("tokenfeed/..."), the measurement units (src/measure/), its own folder's
# files, third-party and standard headers; an internal header of the core only where
# USER_INTERNAL lists it.
USERS = ("tools", "perf", "python/src")
USER_MAY_INCLUDE = {"measure", "inspect"}
# Headers of the core any user may include: annotations, not a unit of the library.
USER_MAY_INCLUDE_HEADERS = {"util/thread_annotations.hpp"}
# Internal headers each user file includes today, one allowance per file and header: a new
# file gets none, and an allowance that is no longer used is an error (remove it), so the
# list only shrinks. tools/ reaches the public API plus the inspect and measure units only
# (issue 26): it has no allowance, and none may be added for it.
USER_INTERNAL = {
    # Benchmarks of the units themselves: the pool, the vectorised row copy, the generator.
    "perf/bench_compare.cpp": {
        "dataset/episode_dataset.hpp", "dataset/token_stream.hpp", "modes/next_token_run.hpp",
        "pipeline/batch_pool.hpp", "sampling/numpy_random.hpp"},
    "python/src/chat.cpp": {"chat/conversation_jsonl.hpp"},
    # Rules the core holds, bound instead of rewritten in Python: the staging protocol, the
    # output check and dtype rule, the mixture's and the shape schedule's schemas (the records
    # a mapping's lists become).
    "python/src/output_dir.cpp": {"io/staging_dir.hpp", "prepare/output_dir.hpp"},
    "python/src/mixture.cpp": {"config/mixture_schema.hpp", "config/shape_schedule_schema.hpp"},
}

# A public header includes only the standard library (C++20's headers, by name) and other
# public headers: a user compiles it with nothing but a C++ compiler and include/.
STD_HEADERS = set("""
algorithm any array atomic barrier bit bitset cassert cctype cerrno cfenv cfloat charconv chrono
cinttypes climits clocale cmath codecvt compare complex concepts condition_variable coroutine csetjmp
csignal cstdarg cstddef cstdint cstdio cstdlib cstring ctime cuchar cwchar cwctype deque exception
execution filesystem format forward_list fstream functional future initializer_list iomanip ios iosfwd
iostream istream iterator latch limits list locale map memory memory_resource mutex new numbers
numeric optional ostream queue random ranges ratio regex scoped_allocator semaphore set shared_mutex
source_location span sstream stack stdexcept stop_token streambuf string string_view syncstream
system_error thread tuple type_traits typeindex typeinfo unordered_map unordered_set utility valarray
variant vector version
""".split())

# Every extension a C++ file can have, so that none escapes the scan.
CPP_SUFFIXES = {".c", ".cc", ".cp", ".cpp", ".cxx", ".c++", ".C", ".h", ".hh", ".hp", ".hpp", ".hxx", ".h++",
                ".H", ".ipp", ".inl", ".tpp", ".txx", ".tcc", ".ixx", ".cppm", ".mpp", ".inc", ".def"}
# What else may sit in src/ and include/: build files.
NOT_CPP = re.compile(r"^(CMakeLists\.txt|.*\.cmake)$")

# `%:` is the digraph of `#`; comments may stand between `#` and `include`.
DIRECTIVE = re.compile(r"^\s*(?:#|%:)\s*(include_next|include|import)\b\s*(.*)$")
HEADER = re.compile(r'^(?:<([^>]*)>|"([^"]*)")')
COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def shown(kind: str, name: str) -> str:
    return f"<{name}>" if kind == "<" else f'"{name}"' if kind == '"' else name


def is_cpp(path: pathlib.Path) -> bool:
    return path.suffix in CPP_SUFFIXES


def logical_lines(path: pathlib.Path):
    """(line number, text) with backslash-continued lines joined, as the preprocessor reads them."""
    lines = path.read_text(encoding="utf-8-sig", errors="replace").splitlines()
    i = 0
    while i < len(lines):
        start, text = i + 1, lines[i]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1] + lines[i]
        yield start, text
        i += 1


def includes(path: pathlib.Path):
    """(line, kind, name) per include directive: kind is '<', '"', or '?' for a computed one."""
    for number, line in logical_lines(path):
        m = DIRECTIVE.match(COMMENTS.sub(" ", line))
        if not m:
            continue
        rest = m.group(2).strip()
        h = HEADER.match(rest)
        if h:
            yield number, ("<" if h.group(1) is not None else '"'), (h.group(1) if h.group(1) is not None else h.group(2))
        else:
            yield number, "?", rest


def code_of(path: pathlib.Path) -> list[tuple[int, str]]:
    """The lines of a file without comments and string literals, for the name rules."""
    text = path.read_text(encoding="utf-8", errors="replace")
    text = re.sub(r'//[^\n]*|/\*.*?\*/|"(\\.|[^"\\\n])*"', lambda m: re.sub(r"[^\n]", " ", m.group(0)), text,
                  flags=re.S)
    return list(enumerate(text.splitlines(), 1))


def scanned_cpp(root: pathlib.Path, area: str) -> list[pathlib.Path]:
    base = root / area
    if not base.is_dir():
        return []
    return sorted(p for p in base.rglob("*") if (p.is_file() or p.is_symlink()) and is_cpp(p))


def files_read(root: pathlib.Path) -> list[pathlib.Path]:
    """Every file the check reads or classifies (ci/check_layout_test.py copies these)."""
    files = [p for area in ("src", "include") if (root / area).is_dir()
             for p in sorted((root / area).rglob("*")) if p.is_file() or p.is_symlink()]
    for area in USERS:
        files += scanned_cpp(root, area)
    return files


def check(root: pathlib.Path) -> list[str]:
    problems: list[str] = []
    src = root / "src"
    folders = {p.name for p in src.iterdir() if p.is_dir()}

    def report(path: pathlib.Path, number: int | None, what: str, rule: str) -> None:
        where = f"{path.relative_to(root)}:{number}" if number else f"{path.relative_to(root)}"
        problems.append(f"{where}: {what} [{rule}]")

    def plain_path(path: pathlib.Path, number: int, kind: str, name: str) -> bool:
        """False (and a report) for an include the check cannot resolve to a file."""
        if kind == "?":
            report(path, number, f"#include {name}: a computed include cannot be checked; write the path",
                   "include-path")
            return False
        parts = name.split("/")
        if name.startswith("/") or "\\" in name or any(p in ("", ".", "..") for p in parts):
            report(path, number, f"{shown(kind, name)}: a path with '.', '..', '\\' or an empty or absolute part "
                                 "escapes the folder rules; write it from src/ or include/", "include-path")
            return False
        if kind == '"' and pathlib.PurePosixPath(name).suffix not in CPP_SUFFIXES:
            report(path, number, f'"{name}": a quoted include names a C++ file (one of CPP_SUFFIXES in '
                                 "ci/check_layout.py), which the check scans", "include-path")
            return False
        return True

    def quoted(path: pathlib.Path, number: int, kind: str, name: str) -> None:
        if kind == "<":
            report(path, number, f"<{name}>: an internal header is written with quotes "
                                 f'("{name}"), so that no system header can stand in for it', "internal-quotes")

    def internal(name: str) -> str | None:
        """The src/ folder an include names, or None."""
        head = name.split("/")[0]
        return head if "/" in name and head in folders else None

    # Every file under src/ and include/ is a C++ file the check scans, or a build file.
    for area in ("src", "include"):
        for path in sorted((root / area).rglob("*")):
            if path.is_symlink():
                report(path, None, "a symbolic link: the check would read one file and the compiler "
                                   "another; copy the file or include it by its own path", "unknown-file")
            elif path.is_file() and not is_cpp(path) and not NOT_CPP.match(path.name):
                report(path, None, "a file the layout check cannot classify: give it a C++ extension it scans "
                                   "(CPP_SUFFIXES) or keep it out of src/ and include/", "unknown-file")
    for path in sorted((root / "include").iterdir()):
        if path.name != "tokenfeed" and not NOT_CPP.match(path.name):
            report(path, None, "include/ holds only tokenfeed/, the public API", "unknown-file")

    for folder in sorted(folders - set(MAY_INCLUDE)):
        problems.append(f"src/{folder}/: a folder with no rule in ci/check_layout.py (MAY_INCLUDE); "
                        "add one and describe it in docs/ARCHITECTURE.md [folder-rule]")
    for path in sorted(src.glob("*")):
        if path.is_file() and is_cpp(path):
            report(path, None, "a source file directly in src/; it belongs in a folder", "loose-file")

    for path in scanned_cpp(root, "src"):
        if path.is_symlink():
            continue
        folder = path.relative_to(src).parts[0]
        if folder not in folders:
            continue
        allowed = MAY_INCLUDE.get(folder, set()) | {folder}
        for number, kind, name in includes(path):
            if not plain_path(path, number, kind, name):
                continue
            target = internal(name)
            if name.startswith(("tools/", "python/", "perf/")):
                report(path, number, f"{shown(kind, name)}: the library includes nothing from tools/, perf/ or "
                                     "python/", "library-users")
                continue
            if kind == '"' and not name.startswith("tokenfeed/") and target is None:
                if name == "commands.hpp":
                    report(path, number, f'"{name}": the library includes nothing from tools/, perf/ or python/',
                           "library-users")
                else:
                    report(path, number, f'"{name}" is not a path from src/ (write "folder/file.hpp")',
                           "include-path")
                continue
            if target is not None:
                quoted(path, number, kind, name)
                if folder in CORE and target == "measure":
                    report(path, number, f"{shown(kind, name)}: measure/ serves tools, perf and python, not the "
                                         "library core", "measure-core")
                elif target not in allowed:
                    report(path, number, f"{shown(kind, name)}: src/{folder}/ may include only "
                                         f'{", ".join(sorted(allowed))} (and public headers)', "folder-deps")
                continue
            if kind == "<" and name.startswith("tokenfeed/"):
                continue
            if kind == "<" and folder in NO_THREADS and THREAD_HEADERS.match(name):
                report(path, number, f"<{name}>: src/{folder}/ starts and waits on no threads and uses "
                                     "neither TBB nor the ring (that is src/pipeline/'s business)", "no-threads")
            if kind == "<" and folder in NO_FILES and FILE_HEADERS.match(name):
                report(path, number, f"<{name}>: src/{folder}/ reads no files", "no-files")
        if folder in NO_THREADS or folder in NO_FILES:
            for number, line in code_of(path):
                if folder in NO_THREADS and (m := THREAD_NAMES.search(line)):
                    report(path, number, f"{m.group(0)}: src/{folder}/ starts and waits on no threads and uses "
                                         "neither TBB nor the ring (that is src/pipeline/'s business)",
                           "no-threads")
                if folder in NO_FILES and (m := FILE_NAMES.search(line)):
                    report(path, number, f"{m.group(0)}: src/{folder}/ reads no files", "no-files")

    # Public headers: only the standard library and other public headers.
    for path in scanned_cpp(root, "include"):
        if path.is_symlink():
            continue
        for number, kind, name in includes(path):
            if not plain_path(path, number, kind, name):
                continue
            if name.startswith("tokenfeed/"):
                continue
            if kind == '"' or internal(name) is not None:
                report(path, number, f"{shown(kind, name)}: a public header includes only public headers "
                                     '("tokenfeed/...") and the standard library', "public-header")
            elif name not in STD_HEADERS:
                report(path, number, f"<{name}>: a public header includes no header outside the C++ standard "
                                     "library and include/tokenfeed/ (users would need it to compile)",
                       "public-header")

    # The library's users: the public API, measure/, their own files; internal headers only
    # as USER_INTERNAL allows.
    used: set[tuple[str, str]] = set()
    for area in USERS:
        for path in scanned_cpp(root, area):
            if path.is_symlink():
                report(path, None, "a symbolic link: the check would read one file and the compiler another",
                       "unknown-file")
                continue
            rel = path.relative_to(root).as_posix()
            for number, kind, name in includes(path):
                if not plain_path(path, number, kind, name):
                    continue
                if name.startswith("tokenfeed/"):
                    continue
                target = internal(name)
                if target is None:
                    if kind == '"' and not (path.parent / name).is_file():
                        report(path, number, f'"{name}": a quoted include names a file of {area}/ beside this '
                                             'one, a public header ("tokenfeed/...") or a src/ header',
                               "include-path")
                    continue
                quoted(path, number, kind, name)
                if target in USER_MAY_INCLUDE or name in USER_MAY_INCLUDE_HEADERS:
                    continue
                if name in USER_INTERNAL.get(rel, set()):
                    used.add((rel, name))
                    continue
                report(path, number, f"{shown(kind, name)}: {area}/ includes the public API (tokenfeed/) and "
                                     f"{', '.join(sorted(USER_MAY_INCLUDE))}/ only, and an internal header "
                                     "where USER_INTERNAL in ci/check_layout.py allows it", "user-internal")
    for rel, names in sorted(USER_INTERNAL.items()):
        if rel.startswith("tools/"):
            problems.append(f"{rel}: USER_INTERNAL in ci/check_layout.py gives the command an internal header; "
                            "tools/ reaches the public API and the inspect and measure units only: make "
                            "what it needs public (include/tokenfeed/) [tools-internal]")
        for name in sorted(names - {n for r, n in used if r == rel}):
            problems.append(f"{rel}: USER_INTERNAL in ci/check_layout.py allows \"{name}\", which it no "
                            "longer includes; remove the allowance [stale-allowance]")
    return problems


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"layout rules: {len(problems)} broken (see docs/ARCHITECTURE.md, 'Dependency rules')")
        return 1
    counts = {area: len(scanned_cpp(root, area)) for area in ("src", "include", *USERS)}
    print("layout rules: " + ", ".join(f"{n} files in {a}/" for a, n in counts.items()) + " checked, all rules hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
