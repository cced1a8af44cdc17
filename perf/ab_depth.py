#!/usr/bin/env python3
"""A focused A/B check of two prefetch depths in one sweep cell, to settle whether a gap
the sweep shows is real or an artefact of how the sweep measured it.

The case it was written for: in the sweep of 2026-11-22 (8x1024, consumer step 0, one
decode thread, sft_episode), prefetch_depth=auto, which stays at 16 there, trailed a
fixed depth of 16 in all three repeats. In that sweep every group ran its depths in the
listed order, so auto always ran last and right after depth 64 (itself slower than 16 in
all three repeats), while 16 ran after 8. This script measures A against B three ways,
many short interleaved pairs each:

  inproc   one bench_prefetch process, A and B alternating (A B B A A B ...): no depth
           is always first or always after the same other one
  procs    a fresh bench_prefetch process per measurement, A and B alternating: nothing
           carries over from one Loader to the next (heap layout, TBB's threads)
  after64  one process, each of A and B measured right after a depth-64 Loader (each
           repeat runs 64 A 64 B 64 B 64 A): the sweep's situation for auto, now for both

Reading it: if B/A is about 1 in all three, the sweep's cell was noise or its order; if
it is about 1 in inproc and procs but not in after64, what the previous Loader leaves
behind (not the depth) made the difference, a harness artefact the sweep now avoids by
shuffling its order; if B trails A in all three, with most pairs on the same side, the
difference is real and belongs to the pipeline (src/pipeline/split_pipeline.cpp).

Run it on a quiet machine (nothing else busy: check `uptime`), from the repository root,
after perf/run.sh has built the drivers and generated the data (or after a --quick run):

  python3 perf/ab_depth.py --bench build/perf-rel/perf/bench_prefetch --config build/perf-rel/raw-full/ep1x.xml

Options: --a 16 --b auto --shape 8x1024 --step 0 --threads 1 --pairs 30 --seconds 0.3
--phases inproc,procs,after64 --out DIR (default build/perf-rel/ab). About 2 minutes with the
defaults. Needs only Python 3's standard library. A and B are bench_prefetch depths: a
number, auto, or auto:MB (auto capped by prefetch_memory_mb, so its pipeline is built for
fewer than 64: auto:10 builds for 31 at 8x1024). If auto trails 16 in every phase, two
more runs tell why:
  --b 64        does a fixed 64 trail 16 as well (the depth in flight)?
  --b auto:10   does auto built for 31 instead of 64 trail less (how auto's pipeline is
                dimensioned: the limiter's threshold with its reservation, ring, pool)?
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

import measure  # perf/measure.py: the same percentiles as the C++ tools


def run_bench(bench, config, shape, step, threads, depths, order, repeats, seconds, csv_path, seed=1):
    cmd = [bench, "--config", config, "--csv", csv_path, "--shapes", shape, "--steps", str(step),
           "--threads", str(threads), "--depths", ",".join(depths), "--order", order, "--repeats", str(repeats),
           "--seconds", str(seconds), "--seed", str(seed)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return list(csv.DictReader(open(csv_path)))


def sign_test_p(wins, n):
    """Two-sided binomial sign test: the chance of a split at least this uneven if A and B
    were equally likely to come out ahead."""
    if n == 0:
        return float("nan")
    k = min(wins, n - wins)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def summarize(name, pairs, a, b):
    """pairs: [(rate_a, rate_b, depth_used_b)]."""
    ratios = [rb / ra for ra, rb, _ in pairs]
    b_behind = sum(r < 1 for r in ratios)
    q = [measure.nearest_rank(ratios, 0.25), measure.median(ratios), measure.nearest_rank(ratios, 0.75)]
    out = {
        "phase": name,
        "pairs": len(pairs),
        f"median_{a}": measure.median(p[0] for p in pairs),
        f"median_{b}": measure.median(p[1] for p in pairs),
        "median_ratio": measure.median(ratios),
        "ratio_q1": q[0],
        "ratio_q3": q[2],
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "b_behind": b_behind,
        "sign_test_p": sign_test_p(b_behind, len(ratios)),
        "b_depth_used": sorted({p[2] for p in pairs}),
    }
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", required=True, help="bench_prefetch binary")
    p.add_argument("--config", required=True, help="base XML config (perf/run.sh writes ep1x.xml into its raw dir)")
    p.add_argument("--a", default="16")
    p.add_argument("--b", default="auto")
    p.add_argument("--shape", default="8x1024")
    p.add_argument("--step", default="0")
    p.add_argument("--threads", default="1")
    p.add_argument("--pairs", type=int, default=30)
    p.add_argument("--seconds", type=float, default=0.3)
    p.add_argument("--phases", default="inproc,procs,after64")
    p.add_argument("--out", default="build/perf-rel/ab")
    o = p.parse_args()
    os.makedirs(o.out, exist_ok=True)
    a, b = o.a, o.b
    results = []
    print(f"A/B: prefetch_depth {a} (A) against {b} (B); {o.shape}, consumer step {o.step} us, "
          f"{o.threads} decode thread(s); {o.pairs} pairs of {o.seconds} s per phase", flush=True)

    def pairs_from(rows, rep_key="repeat"):
        by_rep = {}
        for r in rows:
            by_rep.setdefault(r[rep_key], {})[r["depth_setting"]] = r
        return [(float(v[a]["batches_per_s"]), float(v[b]["batches_per_s"]), int(v[b]["depth_used"]))
                for v in by_rep.values() if a in v and b in v]

    for phase in o.phases.split(","):
        path = os.path.join(o.out, f"{phase}.csv")
        if phase == "inproc":
            rows = run_bench(o.bench, o.config, o.shape, o.step, o.threads, [a, b], "alternate", o.pairs, o.seconds,
                             path)
            pairs = pairs_from(rows)
        elif phase == "procs":
            rows = []
            with tempfile.TemporaryDirectory() as tmp:
                for i in range(o.pairs):
                    for depth in ([a, b] if i % 2 == 0 else [b, a]):
                        one = run_bench(o.bench, o.config, o.shape, o.step, o.threads, [depth], "listed", 1,
                                        o.seconds, os.path.join(tmp, "one.csv"))
                        for r in one:
                            r["repeat"] = str(i)
                        rows += one
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
                w.writeheader()
                w.writerows(rows)
            pairs = pairs_from(rows)
        elif phase == "after64":
            # One process; each repeat runs 64 A 64 B 64 B 64 A (listed): A and B each follow
            # a depth-64 Loader twice, once early and once late in the repeat. Pairs: (A at
            # position 1, B at 3) and (A at 7, B at 5).
            order = ["64", a, "64", b, "64", b, "64", a]
            rows = run_bench(o.bench, o.config, o.shape, o.step, o.threads, order, "listed", (o.pairs + 1) // 2,
                             o.seconds, path)
            at = {(r["repeat"], int(r["position"])): r for r in rows}
            pairs = []
            for rep in sorted({r["repeat"] for r in rows}, key=int):
                for pa, pb in ((1, 3), (7, 5)):
                    ra, rb = at.get((rep, pa)), at.get((rep, pb))
                    if ra and rb and len(pairs) < o.pairs:
                        pairs.append((float(ra["batches_per_s"]), float(rb["batches_per_s"]), int(rb["depth_used"])))
        else:
            sys.exit(f"unknown phase {phase}")
        s = summarize(phase, pairs, a, b)
        results.append(s)
        print(f"{phase:8s} {s['pairs']:3d} pairs: median {a} {s[f'median_{a}']:,.0f}, {b} {s[f'median_{b}']:,.0f} "
              f"batches/s; {b}/{a} median {s['median_ratio']:.3f} (quartiles {s['ratio_q1']:.3f}..{s['ratio_q3']:.3f}, "
              f"range {s['ratio_min']:.3f}..{s['ratio_max']:.3f}); {b} behind in {s['b_behind']} of {s['pairs']} "
              f"(sign test p = {s['sign_test_p']:.3g}); {b} ran at depth {s['b_depth_used']}", flush=True)
    with open(os.path.join(o.out, "summary.json"), "w") as f:
        json.dump({"a": a, "b": b, "shape": o.shape, "step_us": o.step, "threads": o.threads, "pairs": o.pairs,
                   "seconds": o.seconds, "phases": results}, f, indent=2)
    print(f"raw: {o.out}/*.csv, summary: {o.out}/summary.json")
    print("Reading: a gap that holds in every phase with a small p is real; one that holds only in after64 "
          "comes from the Loader measured before, not from the depth.")


if __name__ == "__main__":
    main()
