#!/usr/bin/env python3
"""What `tokenfeed prepare-text`'s time grows with: its shards, and empty lines.

    python perf/prepare_text_scaling.py shards [--shards 500,1000,2000,5000,10000]
                                               [--before OLD_TOKENFEED --before-shards 500,1000,2000]
    python perf/prepare_text_scaling.py empty-lines [--lines 50000000] [--before OLD_TOKENFEED]
    common: [--cli build/tools/tokenfeed] [--scratch DIR] [--md FILE]

shards: the cost of a finished shard must not grow with the shards before it. For each shard
count N, a plain-text corpus of N x 16 distinct lines of 59 bytes is generated (the bytes
tokenizer: 60 tokens a document with its end-of-text id) and prepared with --doc-per line
--shard-tokens 1000 (16 documents a shard), --val-split 0.001 (so that val holds an open
shard, flushed to disk at each finished train shard, as in a real run) and --workers 1.

empty-lines: what an empty line costs with --doc-per line (an empty document, counted)
against --doc-per blank-line (a separator), and whether the progress line follows the
records on compressed input. The input is one line of text then --lines empty lines, plain
and zstd-compressed (zstd from PATH); on each run the first progress line's percentage
(--progress-seconds 0.05) is kept: it must not say 100% while most lines are still to go.

Each run is a fresh process; its wall-clock and CPU seconds are recorded. With --before, an
older build of the command runs beside --cli, interleaved (each case: before, then after),
so that both see the same machine.
"""
import argparse
import json
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOCS_PER_SHARD = 16
SHARD_TOKENS = 1000


def timed(cmd):
    """Runs cmd to its end; its wall-clock and CPU seconds and its stderr."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed: {r.stderr}")
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "stderr": r.stderr}


def emit(header, rows, md):
    table = "\n".join([header, "| " + " | ".join(["---"] * header.count("|")).rsplit(" | ", 1)[0] + " |"] + rows)
    print(table)
    if md:
        Path(md).write_text(table + "\n")


def write_shard_corpus(path, lines, seed=0):
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    with open(path, "w") as f:
        for i in range(lines):
            head = f"{i:09d} "
            f.write(head + "".join(rng.choice(letters) for _ in range(59 - len(head))) + "\n")


def bench_shards(args, scratch, variants):
    before_counts = {int(n) for n in args.before_shards.split(",")}
    rows = []
    for n in [int(x) for x in args.shards.split(",")]:
        corpus = scratch / f"corpus_{n}.txt"
        write_shard_corpus(corpus, n * DOCS_PER_SHARD)
        for name, cli in variants:
            if name == "before" and n not in before_counts:
                continue
            out = scratch / "out"
            shutil.rmtree(out, ignore_errors=True)
            m = timed([cli, "prepare-text", corpus, "--output-dir", out, "--doc-per", "line", "--shard-tokens",
                       SHARD_TOKENS, "--val-split", "0.001", "--workers", "1"])
            splits = json.loads((out / "dataset_metadata.json").read_text())["splits"]
            shutil.rmtree(out, ignore_errors=True)
            shards = splits["train"]["shards"] + splits["val"]["shards"]
            print(f"{name:6s} {shards:6d} shards: {m['wall']:7.2f} s, {m['cpu']:7.2f} s CPU", flush=True)
            rows.append(f"| {name} | {shards:,} | {m['wall']:.2f} | {m['cpu']:.2f} | {1000 * m['wall'] / shards:.2f} | "
                        f"{1000 * m['cpu'] / shards:.2f} |")
        corpus.unlink()
    emit("| variant | shards written | seconds | CPU s | ms per shard | CPU ms per shard |", rows, args.md)


def bench_empty_lines(args, scratch, variants):
    plain = scratch / "empty.txt"
    with open(plain, "wb") as f:
        f.write(b"hello\n")
        block = b"\n" * (1 << 20)
        for left in range(args.lines, 0, -len(block)):
            f.write(block[:min(left, len(block))])
    zst = scratch / "empty.txt.zst"
    subprocess.run(["zstd", "-q", "-f", str(plain), "-o", str(zst)], check=True)
    rows = []
    for corpus in (plain, zst):
        for mode in ("line", "blank-line"):
            for name, cli in variants:
                out = scratch / "out"
                shutil.rmtree(out, ignore_errors=True)
                m = timed([cli, "prepare-text", corpus, "--output-dir", out, "--doc-per", mode, "--workers", "1",
                           "--progress-seconds", "0.05"])
                shutil.rmtree(out, ignore_errors=True)
                first = re.search(r"prepare-text:\s+([0-9.]+)%", m["stderr"])
                progress = first.group(1) + "%" if first else "none"
                print(f"{name:6s} {corpus.name:14s} {mode:10s} {m['wall']:7.2f} s, {m['cpu']:7.2f} s CPU, "
                      f"first progress {progress}", flush=True)
                rows.append(f"| {name} | {corpus.name} | {mode} | {m['wall']:.2f} | {m['cpu']:.2f} | "
                            f"{1e9 * m['wall'] / args.lines:.1f} | {progress} |")
    emit(f"| variant | input ({args.lines:,} empty lines) | --doc-per | seconds | CPU s | ns per line | "
         "first progress line |", rows, args.md)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bench", choices=["shards", "empty-lines"])
    p.add_argument("--shards", default="500,1000,2000,5000,10000")
    p.add_argument("--before-shards", default="500,1000,2000")
    p.add_argument("--lines", type=int, default=50_000_000)
    p.add_argument("--cli", default="build/tools/tokenfeed")
    p.add_argument("--before", default=None, help="an older tokenfeed command to time beside --cli")
    p.add_argument("--scratch", default=None)
    p.add_argument("--md", default=None, help="write the table here (markdown)")
    args = p.parse_args()
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="tf_scaling_"))
    scratch.mkdir(parents=True, exist_ok=True)
    variants = ([("before", args.before)] if args.before else []) + [("after", args.cli)]
    try:
        (bench_shards if args.bench == "shards" else bench_empty_lines)(args, scratch, variants)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
