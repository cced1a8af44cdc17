"""One rank of the torchrun test (test_distributed.py): opens a loader from the config given
as JSON, with rank and world_size left to the launcher's environment, takes `steps`
batches, and gathers every rank's rows with all_gather_object; rank 0 writes them to the
output file as JSON.

    python -m torch.distributed.run --nproc_per_node=4 ... distributed_worker.py KEYS_JSON STEPS OUT
"""
import json
import os
import sys

import torch.distributed as dist

import tokenfeed


def rows_of(batch):
    """Per row: the episodes it holds (sft_packed: every segment's; else its episode or window id)."""
    if batch.segments is not None and len(batch.segments):
        rows = [[] for _ in range(batch.episode_ids.shape[0])]
        for seg in batch.segments:
            rows[int(seg["row"])].append(int(seg["episode"]))
        return rows
    return [[int(i)] for i in batch.episode_ids]


def main():
    keys = json.loads(sys.argv[1])
    steps = int(sys.argv[2])
    out = sys.argv[3]
    dist.init_process_group("gloo")
    tokenfeed.set_logging(False)
    loader = tokenfeed.Loader(keys)
    config = loader.config()
    mine = {
        "rank": dist.get_rank(),
        "config_rank": int(config["rank"]),
        "config_world_size": int(config["world_size"]),
        "steps": [rows_of(b) for b in loader.iter("train", steps=steps)],
    }
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    if dist.get_rank() == 0:
        with open(out + ".tmp", "w") as f:
            json.dump(gathered, f)
        os.replace(out + ".tmp", out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
