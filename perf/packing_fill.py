#!/usr/bin/env python3
"""Whole documents packed into rows (sft_packed, truncation=split) against fixed windows of a
token stream, on the same corpus: how full the rows are, and how many documents each cuts.

    python perf/packing_fill.py [--documents 20000] [--block-size 1024] [--cli build/tools/tokenfeed]

The corpus has log-normal document lengths with a median of block_size / 4 tokens (sigma
1.0), made of ASCII text so that the bytes tokenizer gives one token a byte. It is prepared
twice with `tokenfeed prepare-text` (--format episodes and --format tokens); the packed
figures are `tokenfeed inspect --packed --truncation split`'s (the packer itself, one epoch);
the windows' are computed from the token shards' document offsets: a document is cut when
it crosses the boundary of the non-overlapping windows of block_size + 1 tokens that epoch
sampling carves from each shard. Prints one JSON object.
"""
import argparse
import json
import math
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--documents", type=int, default=20000)
    p.add_argument("--block-size", type=int, default=1024)
    p.add_argument("--sigma", type=float, default=1.0)
    p.add_argument("--cli", default="build/tools/tokenfeed")
    p.add_argument("--md", default=None, help="append the results as markdown to this file")
    args = p.parse_args()
    rng = random.Random(0)
    T = args.block_size
    median = T / 4
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        lengths = []
        with open(tmp / "c.jsonl", "w") as f:
            for _ in range(args.documents):
                n = max(2, int(rng.lognormvariate(math.log(median), args.sigma)))
                lengths.append(n)
                f.write(json.dumps({"text": "x" * (n - 1)}) + "\n")  # n - 1 bytes + eos = n tokens
        for fmt in ("episodes", "tokens"):
            subprocess.run([args.cli, "prepare-text", str(tmp / "c.jsonl"), "--output-dir", str(tmp / fmt),
                            "--format", fmt, "--val-split", "0"], check=True, capture_output=True)
        r = subprocess.run([args.cli, "inspect", str(tmp / "episodes"), "--block-size", str(T), "--packed",
                            "--truncation", "split"], check=True, capture_output=True, text=True).stdout
        m = re.search(r"(\d+) of (\d+) documents cut \(([\d.]+)%\) into (\d+) pieces; padding (\d+) of (\d+) packed "
                      r"positions \(([\d.]+)%\)", r)
        if m is None:
            sys.exit("inspect printed no split line:\n" + r)
        cut, docs, _, pieces, pad, positions, _ = m.groups()
        longer = sum(1 for n in lengths if n > T + 1)
        window_cut = 0
        for shard in sorted((tmp / "tokens" / "train").glob("shard_*.docs.npy")):
            starts = np.load(shard).astype(np.int64)
            total = len(np.load(shard.with_name(shard.name.replace(".docs.npy", ".npy")), mmap_mode="r"))
            ends = np.append(starts[1:], total)
            window_cut += int(np.sum(starts // (T + 1) != (ends - 1) // (T + 1)))
        out = {
            "documents": args.documents, "block_size": T, "median_tokens": median, "sigma": args.sigma,
            "documents_longer_than_a_row": longer,
            "packed_split": {"documents_cut": int(cut), "pieces": int(pieces),
                             "filled_fraction": round(1 - int(pad) / int(positions), 4)},
            "windows": {"documents_cut": window_cut, "cut_fraction": round(window_cut / args.documents, 4),
                        "filled_fraction": 1.0},
        }
        print(json.dumps(out, indent=2))
    if args.md:
        with open(args.md, "a") as f:
            f.write(markdown(out, " ".join(sys.argv)))
    return 0


def markdown(r, command):
    packed, windows = r["packed_split"], r["windows"]
    filled = packed["filled_fraction"]
    only_long = packed["documents_cut"] == r["documents_longer_than_a_row"]
    return "\n".join([
        "", "## Packed documents against windows", "",
        f"Produced by `{command}`: {r['documents']:,} documents of log-normal length (median {r['median_tokens']:.0f} "
        f"tokens = block_size / 4, sigma {r['sigma']}), block_size {r['block_size']}; "
        f"{r['documents_longer_than_a_row']:,} documents are longer than a row.", "",
        "| target | figure | met |", "| --- | --- | --- |",
        f"| `truncation=split` packing fills >= 98% of positions | {100 * filled:.2f}% | {'yes' if filled >= 0.98 else 'no'} |",
        f"| ... and cuts only documents longer than a row | {packed['documents_cut']:,} cut, into {packed['pieces']:,} "
        f"pieces in all | {'yes' if only_long else 'no'} |",
        f"| fixed windows (epoch carving, block_size + 1) cut: the fraction reported | {windows['documents_cut']:,} "
        f"documents = {100 * windows['cut_fraction']:.1f}% | reported |", ""])


if __name__ == "__main__":
    sys.exit(main())
