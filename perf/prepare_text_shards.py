#!/usr/bin/env python3
"""`tokenfeed prepare-text`'s time against its number of shards: the cost of a finished shard
must not grow with the shards before it.

    python perf/prepare_text_shards.py [--shards 500,1000,2000,5000,10000] [--cli build/tools/tokenfeed]
                                       [--before OLD_TOKENFEED --before-shards 500,1000,2000] [--md FILE]

For each shard count N, a plain-text corpus of N x 16 distinct lines of 59 bytes is generated
(the bytes tokenizer: 60 tokens a document with its end-of-text id), and prepared with
--doc-per line --shard-tokens 1000, 16 documents a shard, --val-split 0.001 (so that val holds
an open shard, flushed to disk at each finished train shard, as in a real run) and --workers 1.
Each run is a fresh process; its wall-clock and CPU seconds are recorded. With --before, an
older build of the command runs the counts of --before-shards too, interleaved with the new
one (each count: before, then after), so that both see the same machine.
"""
import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DOCS_PER_SHARD = 16
SHARD_TOKENS = 1000


def write_corpus(path, lines, seed=0):
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    with open(path, "w") as f:
        for i in range(lines):
            head = f"{i:09d} "
            f.write(head + "".join(rng.choice(letters) for _ in range(59 - len(head))) + "\n")


def run(cli, corpus, out):
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run([cli, "prepare-text", str(corpus), "--output-dir", str(out), "--doc-per", "line",
                        "--shard-tokens", str(SHARD_TOKENS), "--val-split", "0.001", "--workers", "1"],
                       capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"{cli} failed: {r.stderr}")
    meta = json.loads((out / "dataset_metadata.json").read_text())
    shards = meta["splits"]["train"]["shards"] + meta["splits"]["val"]["shards"]
    shutil.rmtree(out, ignore_errors=True)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "shards": shards}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shards", default="500,1000,2000,5000,10000")
    p.add_argument("--cli", default="build/tools/tokenfeed")
    p.add_argument("--before", default=None, help="an older tokenfeed command to time beside --cli")
    p.add_argument("--before-shards", default="500,1000,2000")
    p.add_argument("--scratch", default=None)
    p.add_argument("--md", default=None, help="write the table here (markdown)")
    args = p.parse_args()
    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="tf_shards_"))
    scratch.mkdir(parents=True, exist_ok=True)
    before_counts = {int(n) for n in args.before_shards.split(",")} if args.before else set()
    rows = []
    for n in [int(x) for x in args.shards.split(",")]:
        corpus = scratch / f"corpus_{n}.txt"
        write_corpus(corpus, n * DOCS_PER_SHARD)
        variants = ([("before", args.before)] if n in before_counts else []) + [("after", args.cli)]
        for name, cli in variants:
            m = run(cli, corpus, scratch / "out")
            m.update(variant=name, target=n)
            rows.append(m)
            print(f"{name:6s} {n:6d} shards ({m['shards']} written): {m['wall']:7.2f} s wall, {m['cpu']:7.2f} s CPU, "
                  f"{1000 * m['wall'] / m['shards']:.2f} ms/shard", flush=True)
        corpus.unlink()
    lines = ["| variant | shards written | seconds | CPU s | ms per shard |", "| --- | ---: | ---: | ---: | ---: |"]
    for m in rows:
        lines.append(f"| {m['variant']} | {m['shards']:,} | {m['wall']:.2f} | {m['cpu']:.2f} | "
                     f"{1000 * m['wall'] / m['shards']:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.md:
        Path(args.md).write_text(table + "\n")


if __name__ == "__main__":
    sys.exit(main())
