"""One rank of the parallel-layout torchrun test (test_parallel_layout.py): for each case given
as JSON (a name, loader keys without rank and world_size, a number of steps, and whether the
batches come through tokenfeed.torch.broadcast_batch), opens a loader, takes the steps and
records per step each row's episodes and a digest of every array and the bookkeeping; rank
0 also records the loader's state after the steps (a case may resume from an earlier case's
state). Every rank's records are gathered with all_gather_object; rank 0 writes them to the
output file as JSON.

    python -m torch.distributed.run --nproc_per_node=8 ... layout_worker.py CASES_JSON OUT
"""
import hashlib
import json
import os
import sys

import numpy as np
import torch.distributed as dist

import tokenfeed
import tokenfeed.torch as tft

# Bookkeeping that must be equal across a group, besides the arrays.
BOOKKEEPING = ("step", "epoch", "batch_in_epoch", "rows", "cols", "real_rows", "real_positions", "num_sequences",
               "max_seqlen", "has_mask")


def digest(arrays, values):
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    h.update(repr([values[k] for k in BOOKKEEPING]).encode())
    return h.hexdigest()


def loader_record(batch):
    """Rows (episodes per row) and the digest of a batch from the loader itself."""
    arrays = batch.arrays()
    if "segments" in arrays:
        s = arrays["segments"]
        arrays["segments"] = np.stack([s["row"], s["column"], s["positions"], s["episode"]], axis=1).astype(np.int64)
    values = {k: getattr(batch, k) for k in BOOKKEEPING}
    return rows_of(arrays), digest(arrays, values)


def group_record(batch):
    """The same from a broadcast GroupBatch, so that both roads can be compared."""
    arrays = {name: t.cpu().numpy() for name, t in batch.tensors.items()}
    values = {k: getattr(batch, k) for k in BOOKKEEPING}
    return rows_of(arrays), digest(arrays, values)


def rows_of(arrays):
    if "segments" in arrays and len(arrays["segments"]):
        rows = [[] for _ in range(arrays["episode_ids"].shape[0])]
        for row, _, _, episode in arrays["segments"]:
            rows[int(row)].append(int(episode))
        return rows
    return [[int(i)] for i in arrays["episode_ids"]]


def run_case(case, states):
    loader = tokenfeed.Loader(case["keys"])
    if "resume_from" in case:
        loader.load_state_dict(states[case["resume_from"]])
    mine = {"rank": dist.get_rank(), "layout": loader.parallel_layout, "config_dp_rank": loader.config["data_parallel_rank"],
            "config_dp_size": loader.config["data_parallel_size"], "steps": []}
    if case.get("broadcast"):
        group = tft.data_parallel_group(loader)
        for _ in range(case["steps"]):
            mine["steps"].append(group_record(tft.broadcast_batch(loader, group)))
    else:
        for batch in loader.iter("train", steps=case["steps"]):
            mine["steps"].append(loader_record(batch))
    if mine["layout"]["data_leader"]:
        mine["state"] = loader.state_dict()
    loader.close()
    return mine


def main():
    cases = json.loads(sys.argv[1])
    out = sys.argv[2]
    dist.init_process_group("gloo")
    tokenfeed.set_logging(False)
    results, states = {}, {}
    for case in cases:
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, run_case(case, states))
        states[case["name"]] = gathered[0]["state"]
        results[case["name"]] = gathered
    if dist.get_rank() == 0:
        with open(out + ".tmp", "w") as f:
            json.dump(results, f)
        os.replace(out + ".tmp", out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
