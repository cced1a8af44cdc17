"""One rank of the torchrun test (test_distributed.py): for each case given as JSON (a name,
loader keys without rank and world_size, and a number of steps), opens a loader (rank and
world_size come from the launcher's environment), takes the steps, and gathers every
rank's rows with all_gather_object; rank 0 writes them to the output file as JSON.

    python -m torch.distributed.run --nproc_per_node=4 ... distributed_worker.py CASES_JSON OUT
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
    cases = json.loads(sys.argv[1])
    out = sys.argv[2]
    dist.init_process_group("gloo")
    tokenfeed.set_logging(False)
    results = {}
    for case in cases:
        loader = tokenfeed.Loader(case["keys"])
        config = loader.config
        mine = {
            "rank": dist.get_rank(),
            "config_rank": int(config["rank"]),
            "config_world_size": int(config["world_size"]),
            "steps": [rows_of(b) for b in loader.iter("train", steps=case["steps"])],
        }
        loader.close()
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        results[case["name"]] = gathered
    if dist.get_rank() == 0:
        with open(out + ".tmp", "w") as f:
            json.dump(results, f)
        os.replace(out + ".tmp", out)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
