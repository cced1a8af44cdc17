#!/usr/bin/env python3
"""What opening a large dataset costs: time and anonymous memory, with the first batch's.

For each run, in this process: RssAnon before tokenfeed.Loader(config) and right after it
returns (the open: every split mapped and validated, the fingerprint hashed, the kept-episode
list made; the pipeline and its epoch orders start at the first batch, so they are not in
it), then the first get_batch and RssAnon again (the first epoch's order made; the next
one's being made ahead in the background). RssAnon is resident memory that is not
file-backed, so the memory-mapped dataset does not count. One JSON line per run:

    open_ms, first_batch_ms              wall time of the constructor and of the first batch
    rss_anon_before_mb                   RssAnon (MiB) before the constructor
    open_anon_mb, first_batch_anon_mb    what the open added, and then the first batch
    episodes, kept_episodes              of the split, from Loader.info()

    open_memory.py --config X.xml [--repeats N] [--split train] [--out FILE]
"""
from __future__ import annotations

import argparse
import gc
import json
import sys
import time

import tokenfeed


def rss_anon_mb() -> float:
    """RssAnon of this process in MiB, from /proc/self/status (as src/measure/ reads it)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon line in /proc/self/status")


def one_run(config: str, split: str) -> dict:
    gc.collect()
    before = rss_anon_mb()
    start = time.perf_counter()
    loader = tokenfeed.Loader(config)
    open_ms = 1000 * (time.perf_counter() - start)
    opened = rss_anon_mb()
    info = loader.info(split)
    start = time.perf_counter()
    loader.get_batch(split)
    first_ms = 1000 * (time.perf_counter() - start)
    first = rss_anon_mb()
    loader.stop()
    del loader
    return {"open_ms": open_ms, "first_batch_ms": first_ms, "rss_anon_before_mb": before,
            "open_anon_mb": opened - before, "first_batch_anon_mb": first - opened,
            "episodes": info["episodes"], "kept_episodes": info["kept_episodes"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--out", help="append the JSON lines to this file (default: stdout)")
    a = p.parse_args()
    out = open(a.out, "a") if a.out else sys.stdout
    for _ in range(a.repeats):
        out.write(json.dumps(one_run(a.config, a.split)) + "\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
