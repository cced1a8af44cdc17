#!/usr/bin/env python3
"""clang-tidy over C++ files, skipping those it already passed unchanged.

    ci/clang_tidy_cached.py BUILD_DIR JOBS FILE...

A file passes when clang-tidy (checks in .clang-tidy) reports nothing for it. What it
reads is the file, every header the compiler read for it (the build's own dependency
record: `ninja -t deps`), its compile command, .clang-tidy and clang-tidy's version; the
SHA-256 of all of those (paths inside the checkout taken relative to it, so that another
clone shares the record) is its key, and a file that passed is recorded under its key in
TOKENFEED_TIDY_CACHE (default ~/.cache/tokenfeed/clang-tidy-passed). A file whose key is
recorded is not checked again: only what changed, or what includes what changed, is. A
file the build has no dependency record for is always checked. Only passes are recorded,
so a finding is reported on every run until it is fixed.

Runs JOBS clang-tidy processes, a few files each; prints their findings; exits 1 when any
file fails, 0 otherwise. The last line says how many files were checked and skipped.
"""
import concurrent.futures
import hashlib
import json
import os
import pathlib
import subprocess
import sys

FILES_PER_PROCESS = 4


def ninja_deps(build_dir):
    """object path (relative to build_dir) -> the files it was compiled from (absolute)."""
    try:
        text = subprocess.run(["ninja", "-C", str(build_dir), "-t", "deps"], capture_output=True, text=True,
                              check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    deps, current = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace():
            current = line.split(":", 1)[0]
            deps[current] = []
        elif line.strip() and current is not None:
            deps[current].append(str((build_dir / line.strip()).resolve()))
    return deps


def file_digest(path, memo):
    if path not in memo:
        try:
            memo[path] = hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
        except OSError:
            memo[path] = "missing"
    return memo[path]


def object_of(entry):
    """The object file a compile command writes (its -o argument), relative to the build."""
    args = entry.get("arguments") or entry["command"].split()
    return args[args.index("-o") + 1] if "-o" in args[:-1] else None


def keys(build_dir, files):
    """file -> its key, for the files the build recorded dependencies of."""
    commands = {str(pathlib.Path(e["directory"], e["file"]).resolve()): e
                for e in json.loads((build_dir / "compile_commands.json").read_text())}
    deps = ninja_deps(build_dir)
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, text=True).stdout
    config = pathlib.Path(".clang-tidy").read_text() if pathlib.Path(".clang-tidy").exists() else ""
    # Paths inside the checkout are hashed relative to it, so that a clone elsewhere (CI's)
    # finds what another clone passed.
    root = str(pathlib.Path.cwd().resolve())
    def local(text):
        return text.replace(root + "/", "").replace(root, ".")
    memo, result = {}, {}
    for f in files:
        entry = commands.get(str(pathlib.Path(f).resolve()))
        output = object_of(entry) if entry is not None else None
        if output not in deps:
            continue
        h = hashlib.sha256()
        for part in (version, config, local(entry.get("command") or " ".join(entry.get("arguments", [])))):
            h.update(part.encode() + b"\0")
        for name, dep in sorted((local(d), d) for d in set(deps[output]) | {str(pathlib.Path(f).resolve())}):
            h.update(f"{name}:{file_digest(dep, memo)}\0".encode())
        result[f] = h.hexdigest()
    return result


def tidy(build_dir, files):
    """(files, output, passed) of one clang-tidy process."""
    run = subprocess.run(["clang-tidy", "-p", str(build_dir), "--quiet", *files], capture_output=True, text=True)
    return files, run.stdout, run.returncode == 0 and "warning:" not in run.stdout and "error:" not in run.stdout


def main():
    build_dir, jobs, files = pathlib.Path(sys.argv[1]).resolve(), int(sys.argv[2]), sys.argv[3:]
    cache = pathlib.Path(os.environ.get("TOKENFEED_TIDY_CACHE",
                                        pathlib.Path.home() / ".cache" / "tokenfeed" / "clang-tidy-passed"))
    cache.mkdir(parents=True, exist_ok=True)
    key_of = keys(build_dir, files)
    todo = [f for f in files if f not in key_of or not (cache / key_of[f]).exists()]
    groups = [todo[i:i + FILES_PER_PROCESS] for i in range(0, len(todo), FILES_PER_PROCESS)]
    failed = False
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(jobs, 1)) as pool:
        for group, output, passed in pool.map(lambda g: tidy(build_dir, g), groups):
            if output:
                print(output, end="")
            if passed:
                for f in group:
                    if f in key_of:
                        (cache / key_of[f]).touch()
            else:
                failed = True
    print(f"clang-tidy: {len(todo)} files checked, {len(files) - len(todo)} unchanged since they passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
