#!/usr/bin/env python3
"""A soak run: a training-like consumer takes batches from one loader for a given time and
the process's resources are sampled from /proc/self at the start, at intervals and at the
end, to show that a long run does not grow.

Each step takes a batch, touches it (sums x and, when present, the loss weights, as a
trainer reads its inputs), spends --consumer-ms of CPU, sleeps --idle-ms (a trainer
waiting for its accelerator), and drops it. Every
--every seconds, and at the end, one line:

  soak t=600s steps=123456 rss_mb=85.2 rss_anon_mb=40.1 threads=4 fds=9 maps=180

then, at the end, the growth from the first sample (taken after --warmup steps) to the
last, and a verdict: "no growth" when threads and fds are unchanged, maps grew by at most
--maps-slack (the allocator may map an arena or two as the pool settles) and anonymous
memory (RssAnon) by at most --rss-slack-mb. VmRSS is reported too; it also counts the
dataset's file pages as they are first read, which is not growth. The exit status is 1 when it grew.

  python3 perf/soak.py --config my.xml --seconds 3600 --consumer-ms 20
  python3 perf/soak.py --config my.xml --seconds 3600 -o prefetch_depth=8 -o decode_threads=2

Needs the tokenfeed module (python/run_tests.sh installs it into build/py-venv-debian)."""
import argparse
import os
import sys
import time

import numpy as np

import tokenfeed


def sample():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon"):
                out[key] = int(value.split()[0]) / 1024.0
            elif key == "Threads":
                out["Threads"] = int(value)
    with open("/proc/self/maps") as f:
        out["maps"] = sum(1 for _ in f)
    out["fds"] = len(os.listdir("/proc/self/fd"))
    return out


def line(t, steps, s):
    return (f"soak t={t:.0f}s steps={steps} rss_mb={s['VmRSS']:.1f} rss_anon_mb={s.get('RssAnon', 0):.1f} "
            f"threads={s['Threads']} fds={s['fds']} maps={s['maps']}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="XML config of the loader")
    p.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE",
                   help="a config key to override (repeatable)")
    p.add_argument("--split", default="train")
    p.add_argument("--seconds", type=float, default=3600.0, help="duration of the measured part")
    p.add_argument("--consumer-ms", type=float, default=10.0, help="CPU time per step on the consumer's thread")
    p.add_argument("--idle-ms", type=float, default=0.0,
                   help="time per step the consumer sleeps (a trainer waiting for its accelerator), after its CPU time")
    p.add_argument("--every", type=float, default=60.0, help="seconds between samples")
    p.add_argument("--warmup", type=int, default=200, help="steps before the first sample")
    p.add_argument("--rss-slack-mb", type=float, default=16.0, help="RSS growth still called no growth")
    p.add_argument("--maps-slack", type=int, default=8, help="growth in mappings still called no growth")
    args = p.parse_args(argv)

    overrides = dict(kv.split("=", 1) for kv in args.override)
    loader = tokenfeed.Loader(args.config, **overrides)

    def step():
        batch = loader.get_batch(args.split)
        checksum = int(np.asarray(batch.x).sum())
        weights = batch.token_weights if batch.token_weights is not None and batch.token_weights.size else None
        if weights is not None:
            checksum += int(np.asarray(weights).sum())
        end = time.perf_counter() + args.consumer_ms / 1000.0
        while time.perf_counter() < end:
            pass
        if args.idle_ms > 0:
            time.sleep(args.idle_ms / 1000.0)
        del batch
        return checksum

    for _ in range(args.warmup):
        step()
    first = sample()
    start = time.monotonic()
    print(line(0, 0, first), flush=True)
    steps, next_report = 0, args.every
    while True:
        elapsed = time.monotonic() - start
        if elapsed >= args.seconds:
            break
        step()
        steps += 1
        if elapsed >= next_report:
            print(line(elapsed, steps, sample()), flush=True)
            next_report += args.every
    last = sample()
    print(line(time.monotonic() - start, steps, last), flush=True)
    # Anonymous memory, not VmRSS: VmRSS also counts the dataset's file pages as the run
    # first reads them (bounded by the dataset's size, and the page cache's to reclaim).
    grew = (last["Threads"] > first["Threads"] or last["fds"] > first["fds"]
            or last["maps"] - first["maps"] > args.maps_slack
            or last.get("RssAnon", 0) - first.get("RssAnon", 0) > args.rss_slack_mb)
    print(f"soak growth: rss_anon_mb {last.get('RssAnon', 0) - first.get('RssAnon', 0):+.1f} "
          f"(rss_mb {last['VmRSS'] - first['VmRSS']:+.1f}, with the dataset's file pages), "
          f"threads {last['Threads'] - first['Threads']:+d}, "
          f"fds {last['fds'] - first['fds']:+d}, maps {last['maps'] - first['maps']:+d}: "
          f"{'GREW' if grew else 'no growth'}")
    loader.close()
    return 1 if grew else 0


if __name__ == "__main__":
    sys.exit(main())
