"""The Python side of the comparison: the same batches as tokenfeed's sft_episode mode,
made the way a Python user would, on the same dataset.

  numpy    a careful loader: np.memmap of each shard, the epoch order of
           RandomState(epoch_seed + epoch).permutation, the index as plain Python lists,
           and each row written straight into preallocated int64 (B, T) x and y and a
           float32 mask, reused from batch to batch (the trainer copies them to the device
           before asking for the next): x[r, :k] = tokens[start:start+k], the rest the pad
           id; y likewise from start+1; mask[1:T+1] (0 on padding).
  numpy_stack
           the straightforward version of the same: fresh arrays per row (t = tokens[...],
           x = t[:T], y = t[1:T+1], mask[1:T+1], padded), then np.stack into the batch.
  torch    torch.utils.data.DataLoader over an equivalent map-style Dataset (one episode per
           item, the same padding), batch_size=B, the same order through a sampler,
           num_workers=2 (persistent, default prefetch_factor), default collation into
           int64/float32 tensors.

Both are checked against a batch that `tokenfeed dump` wrote (when --check-dir is given)
so that the comparison is of the same work. Prints one JSON object per measurement line
and writes them to --out (with the check's result as a first line that has no "loader").

  python py_loaders.py --dataset DIR --batch-size 8 --block-size 1024 --out rows.jsonl
        [--loaders numpy,torch] [--repeats 3] [--seconds 3] [--check-dir DUMP]
"""
import argparse
import json
import os
import sys
import time

import numpy as np


def open_split(split_dir):
    """Shards in sorted name order: (tokens memmap, mask memmap, index (n, 2) uint64)."""
    meta_path = os.path.join(os.path.dirname(split_dir.rstrip("/")), "dataset_metadata.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    dtype = np.uint16 if meta.get("token_dtype", "uint16") == "uint16" else np.uint32
    dirs = sorted(d for d in os.listdir(split_dir) if d.startswith("shard_"))
    dirs = [os.path.join(split_dir, d) for d in dirs] or [split_dir]
    shards = []
    for d in dirs:
        tokens = np.memmap(os.path.join(d, "tokens.bin"), dtype=dtype, mode="r")
        mask_path = os.path.join(d, "mask.bin")
        mask = np.memmap(mask_path, dtype=np.uint8, mode="r") if os.path.exists(mask_path) else None
        index = np.fromfile(os.path.join(d, "episodes.idx"), dtype=np.uint64).reshape(-1, 2)
        shards.append((tokens, mask, index))
    return shards, meta


class Episodes:
    """Global episode ids over the shards, as tokenfeed numbers them."""

    def __init__(self, split_dir, min_tokens=2):
        self.shards, self.meta = open_split(split_dir)
        self.shard_of = np.concatenate([np.full(len(ix), i, dtype=np.int64) for i, (_, _, ix) in enumerate(self.shards)])
        self.local = np.concatenate([np.arange(len(ix), dtype=np.int64) for (_, _, ix) in self.shards])
        lengths = np.concatenate([ix[:, 1] for (_, _, ix) in self.shards]).astype(np.int64)
        self.kept = np.nonzero(lengths >= min_tokens)[0]
        self.pad = int(self.meta.get("eot_token_id", self.meta.get("eos_token_id", 0)))

    def epoch_order(self, seed, epoch):
        return self.kept[np.random.RandomState(seed + epoch).permutation(len(self.kept))]

    def row(self, episode, T):
        """x, y, mask of one row, as a Python user writes it."""
        tokens, mask, index = self.shards[self.shard_of[episode]]
        start, n = index[self.local[episode]]
        start, n = int(start), int(n)
        t = tokens[start:start + min(n, T + 1)]
        x = np.full(T, self.pad, dtype=np.int64)
        y = np.full(T, self.pad, dtype=np.int64)
        m = np.zeros(T, dtype=np.float32)
        x[:len(t[:T])] = t[:T]
        y[:len(t[1:T + 1])] = t[1:T + 1]
        if mask is not None:
            mm = mask[start + 1:start + min(n, T + 1)]
            m[:len(mm)] = mm
        return x, y, m


def numpy_prealloc_batches(ep, B, T, seed):
    """The careful loader: rows written into buffers allocated once."""
    x = np.empty((B, T), dtype=np.int64)
    y = np.empty((B, T), dtype=np.int64)
    m = np.empty((B, T), dtype=np.float32)
    # Per global episode: (tokens, mask, start, n) as Python objects, looked up once.
    where = []
    for shard, local in zip(ep.shard_of.tolist(), ep.local.tolist()):
        tokens, mask, index = ep.shards[shard]
        where.append((tokens, mask, int(index[local, 0]), int(index[local, 1])))
    pad = ep.pad
    epoch = 0
    while True:
        order = ep.epoch_order(seed, epoch).tolist()
        for k in range(len(order) // B):
            for r, e in enumerate(order[k * B:(k + 1) * B]):
                tokens, mask, start, n = where[e]
                xc, yc = min(n, T), min(n - 1, T)
                x[r, :xc] = tokens[start:start + xc]
                x[r, xc:] = pad
                y[r, :yc] = tokens[start + 1:start + 1 + yc]
                y[r, yc:] = pad
                if mask is not None:
                    m[r, :yc] = mask[start + 1:start + 1 + yc]
                    m[r, yc:] = 0
                else:
                    m[r] = 0
            yield x, y, m
        epoch += 1


def numpy_batches(ep, B, T, seed):
    epoch = 0
    while True:
        order = ep.epoch_order(seed, epoch)
        for k in range(len(order) // B):
            rows = [ep.row(int(e), T) for e in order[k * B:(k + 1) * B]]
            yield (np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]), np.stack([r[2] for r in rows]))
        epoch += 1


def measure(batches, seconds, warmup):
    for _ in range(warmup):
        next(batches)
    n, start = 0, time.perf_counter()
    while True:
        next(batches)
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and n >= 20:
            return n / elapsed, n


def torch_batches(split_dir, B, T, seed, workers):
    import torch
    from torch.utils.data import DataLoader, Dataset

    class EpisodeDataset(Dataset):
        def __init__(self):
            self.ep = Episodes(split_dir)

        def __len__(self):
            return int(self.ep.kept.max()) + 1

        def __getitem__(self, episode):
            return self.ep.row(int(episode), T)

    ds = EpisodeDataset()
    order = ds.ep.epoch_order(seed, 0).tolist()
    epochs = [order]
    loader = DataLoader(ds, batch_size=B, sampler=order, num_workers=workers, persistent_workers=workers > 0,
                        drop_last=True)
    while True:
        for x, y, m in loader:
            yield x, y, m


def check(dump_dir, ep, B, T, seed, batches):
    """The first batches of `batches` equal those tokenfeed dumped."""
    x = np.load(os.path.join(dump_dir, "x.npy"))
    y = np.load(os.path.join(dump_dir, "y.npy"))
    m = np.load(os.path.join(dump_dir, "mask.npy")) if os.path.exists(os.path.join(dump_dir, "mask.npy")) else None
    gen = batches(ep, B, T, seed)
    for k in range(x.shape[0] // B):
        bx, by, bm = next(gen)
        assert (bx == x[k * B:(k + 1) * B]).all(), f"x differs in batch {k}"
        assert (by == y[k * B:(k + 1) * B]).all(), f"y differs in batch {k}"
        if m is not None:
            assert (bm == m[k * B:(k + 1) * B]).all(), f"mask differs in batch {k}"
        else:
            assert not bm.any(), f"mask not 0 in batch {k} of a dataset without one"
    return x.shape[0] // B


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dataset", required=True)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--block-size", type=int, default=1024)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--loaders", default="numpy,numpy_stack,torch")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--check-dir")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    split_dir = os.path.join(a.dataset, "train")
    ep = Episodes(split_dir)
    rows = []
    if a.check_dir:
        for name, batches in (("numpy", numpy_prealloc_batches), ("numpy_stack", numpy_batches)):
            n = check(a.check_dir, ep, a.batch_size, a.block_size, a.seed, batches)
            # Kept in the output too (a row without "loader"), so that the claim is in the raw file.
            row = {"check": f"{name} loader == tokenfeed dump", "batches": n, "passed": True}
            rows.append(row)
            print(json.dumps(row), flush=True)
    loaders = a.loaders.split(",")
    gens = {}
    for rep in range(a.repeats):
        for name in loaders:
            if name == "numpy":
                rate, n = measure(numpy_prealloc_batches(ep, a.batch_size, a.block_size, a.seed), a.seconds, 20)
            elif name == "numpy_stack":
                rate, n = measure(numpy_batches(ep, a.batch_size, a.block_size, a.seed), a.seconds, 20)
            elif name == "torch":
                import torch
                if "torch" not in gens:  # one DataLoader, its workers kept across repeats
                    gens["torch"] = torch_batches(split_dir, a.batch_size, a.block_size, a.seed, a.workers)
                rate, n = measure(gens["torch"], a.seconds, 50)
            else:
                sys.exit(f"unknown loader {name}")
            row = {"repeat": rep, "loader": name, "batches_per_s": rate, "batches": n,
                   "batch_size": a.batch_size, "block_size": a.block_size}
            if name == "torch":
                row["torch_version"] = torch.__version__
                row["workers"] = a.workers
            row["numpy_version"] = np.__version__
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(a.out, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
