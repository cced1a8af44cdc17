"""What a batch costs the Python trainer's thread: tokenfeed's get_batch against a numpy
loader that builds the same batches on that thread.

    python python/bench_get_batch.py [--config data/sample/sample.xml] [--batches 2000]
        [--warmup 200] [--step-us 0,2000] [--repeats 3] [--json out.jsonl]

Both make the sft_episode batches of the config (episode mode only): x, y (int64) and the
float32 mask aligned to y, in the numpy-compatible epoch order, checked equal on the first
batches before timing. Per batch, on the trainer's thread:

  tokenfeed  loader.get_batch() and taking the x, y, mask views (no copy; the batch was
             prepared on background threads)
  get_batch  loader.get_batch() alone (the figure of the latency targets; the batch is
             not read)
  numpy      the loader a Python user writes: np.memmap of each shard, the epoch order of
             RandomState(epoch_seed + epoch).permutation, and per row t[:T], t[1:T+1] and the
             mask sliced, padded and np.stack'ed

  floor      np.empty(3): the cheapest call into a C extension that returns a new object,
             timed the same way. What any call costs the trainer's thread after a step
             (its code and data out of the caches), the part of get_batch's time no loader
             can save (perf/RESULTS_by_hand.md, "What a step's idle time costs")

Each call's result is dropped before the clock is read again, so a batch's release back to
the loader is timed with it (as a trainer's loop pays it when its next batch replaces it).
Between batches the "trainer" busy-waits --step-us microseconds holding the GIL (0: it
takes batches back to back, the hardest case for prefetching). The figures are the median
over interleaved repeats of each run's p50, p99 and mean, in microseconds.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "perf"))
import measure  # noqa: E402  perf/measure.py: the same percentiles as the C++ tools

# This file sits beside the package's sources (python/tokenfeed/, without the compiled
# module): import the installed package, not those.
sys.path = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.dirname(os.path.abspath(__file__))]
import tokenfeed  # noqa: E402


class NumpyEpisodes:
    """The straightforward numpy loader (sft_episode, drop_last, the batch rule)."""

    def __init__(self, dataset_dir, B, T, seed, pad, min_tokens=2):
        meta_path = os.path.join(dataset_dir, "dataset_metadata.json")
        meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
        dtype = np.uint16 if meta.get("token_dtype", "uint16") == "uint16" else np.uint32
        split = os.path.join(dataset_dir, "train")
        dirs = sorted(d for d in os.listdir(split) if d.startswith("shard_"))
        self.shards = []
        for d in [os.path.join(split, d) for d in dirs] or [split]:
            tokens = np.memmap(os.path.join(d, "tokens.bin"), dtype=dtype, mode="r")
            mask_path = os.path.join(d, "mask.bin")
            mask = np.memmap(mask_path, dtype=np.uint8, mode="r") if os.path.exists(mask_path) else None
            index = np.fromfile(os.path.join(d, "episodes.idx"), dtype=np.uint64).reshape(-1, 2)
            self.shards.append((tokens, mask, index))
        self.where = [(s, i) for s, (_, _, ix) in enumerate(self.shards) for i in range(len(ix))]
        lengths = np.concatenate([ix[:, 1] for (_, _, ix) in self.shards]).astype(np.int64)
        self.kept = np.nonzero(lengths >= min_tokens)[0]
        self.B, self.T, self.seed, self.pad = B, T, seed, pad

    def row(self, episode):
        s, i = self.where[episode]
        tokens, mask, index = self.shards[s]
        start, n = (int(v) for v in index[i])
        T = self.T
        t = tokens[start:start + min(n, T + 1)]
        x = np.full(T, self.pad, dtype=np.int64)
        y = np.full(T, self.pad, dtype=np.int64)
        m = np.zeros(T, dtype=np.float32)
        x[:len(t[:T])] = t[:T]
        y[:len(t[1:])] = t[1:]
        if mask is not None:
            mm = mask[start + 1:start + min(n, T + 1)]
            m[:len(mm)] = mm
        return x, y, m

    def batches(self):
        epoch = 0
        while True:
            order = self.kept[np.random.RandomState(self.seed + epoch).permutation(len(self.kept))]
            for k in range(len(order) // self.B):
                rows = [self.row(int(e)) for e in order[k * self.B:(k + 1) * self.B]]
                yield (np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]), np.stack([r[2] for r in rows]))
            epoch += 1


def spin(us):
    if us > 0:
        end = time.perf_counter() + us * 1e-6
        while time.perf_counter() < end:
            pass


def measure_calls(next_batch, batches, warmup, step_us):
    for _ in range(warmup):
        next_batch()
        spin(step_us)
    costs = np.empty(batches)
    clock = time.perf_counter
    for i in range(batches):
        t0 = clock()
        next_batch()
        costs[i] = clock() - t0
        spin(step_us)
    costs *= 1e6
    return {"p50": measure.nearest_rank(costs, 0.50), "p99": measure.nearest_rank(costs, 0.99),
            "mean": float(costs.mean()), "max": float(costs.max())}


def tokenfeed_source(config, views=True):
    loader = tokenfeed.Loader(config)

    def next_batch():
        b = loader.get_batch("train")
        return b.x, b.y, b.mask  # the views a trainer uses

    return loader, next_batch if views else (lambda: loader.get_batch("train"))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p.add_argument("--config", default=os.path.join(repo, "data", "sample", "sample.xml"))
    p.add_argument("--batches", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--step-us", default="0,2000", help="comma-separated trainer step times to run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", help="also write one JSON object per row to this file")
    a = p.parse_args()

    tokenfeed.set_logging(False)
    probe = tokenfeed.Loader(a.config)
    c = probe.config
    if c["dataset_mode"] != "sft_episode":
        sys.exit("bench_get_batch.py compares the sft_episode mode only")
    B, T, seed, pad = int(c["batch_size"]), int(c["block_size"]), int(c["epoch_seed"]), int(c["pad_token_id"])
    use_mask = probe.info()["mask"]
    numpy_loader = NumpyEpisodes(c["dataset_dir"], B, T, seed, pad, int(c["episode_min_tokens"]))

    # The same work: the first batches are equal.
    gen = numpy_loader.batches()
    check = 2 * probe.batches_per_epoch() + 3
    for k in range(check):
        b = probe.get_batch()
        x, y, m = next(gen)
        assert (b.x == x).all() and (b.y == y).all(), f"batch {k} differs"
        if use_mask:
            assert (b.mask == m).all(), f"mask of batch {k} differs"
    probe.close()

    rows = []
    print(f"config {a.config}: {B} x {T}, mask={'on' if use_mask else 'off'}, {a.batches} batches after "
          f"{a.warmup} warm-up, median of {a.repeats} interleaved repeats; checked equal on {check} batches")
    print(f"{'step_us':>8} {'loader':>10} {'p50 us':>9} {'p99 us':>9} {'mean us':>9}")
    for step_us in [float(s) for s in a.step_us.split(",")]:
        runs = {"tokenfeed": [], "get_batch": [], "numpy": [], "floor": []}
        decode_threads = prefetch_depth = None
        for _ in range(a.repeats):
            for name, views in (("tokenfeed", True), ("get_batch", False)):
                loader, next_batch = tokenfeed_source(a.config, views)
                runs[name].append(measure_calls(next_batch, a.batches, a.warmup, step_us))
                s = loader.stats()
                decode_threads, prefetch_depth = s["decode_threads"], s["prefetch_depth"]
                loader.close()
            gen = numpy_loader.batches()
            runs["numpy"].append(measure_calls(lambda: next(gen), a.batches, a.warmup, step_us))
            runs["floor"].append(measure_calls(lambda: np.empty(3), a.batches, a.warmup, step_us))
        for name, results in runs.items():
            row = {"loader": name, "step_us": step_us, "batch_size": B, "block_size": T, "mask": use_mask,
                   "batches": a.batches, "repeats": a.repeats,
                   **{k: measure.median(r[k] for r in results) for k in ("p50", "p99", "mean")}}
            if name in ("tokenfeed", "get_batch"):
                row.update(decode_threads=decode_threads, prefetch_depth=prefetch_depth)
            rows.append(row)
            print(f"{step_us:8.0f} {name:>10} {row['p50']:9.1f} {row['p99']:9.1f} {row['mean']:9.1f}")
    print(json.dumps({"python": sys.version.split()[0], "numpy": np.__version__, "tokenfeed": tokenfeed.__version__,
                      "cpus": os.cpu_count(), "loadavg_after": os.getloadavg()}))
    if a.json:
        with open(a.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
