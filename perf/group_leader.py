#!/usr/bin/env python3
"""CPU per node of data_loading=group_leader against every_rank: one data-parallel group of
TP processes (tensor_parallel_size = TP, world_size = TP, so dp_size = 1) on this node,
started by torchrun (gloo on the loopback), each taking the same batches for a fixed number
of steps behind a simulated training step.

  every_rank     every process decodes the group's batches itself (loader.iter)
  group_leader   the leader decodes; tokenfeed.torch.broadcast_batch sends each batch to
                 the others over gloo

Per run, summed over the node: the CPU seconds of every thread but the trainer's
(stats()'s loader_threads_core_fraction over the loop's wall time, on a rank with a
pipeline: its decoders and admitter, and gloo's own threads, which share the process; 0 on
a rank without one), and the CPU seconds all TP processes spent in the loop
(time.process_time deltas: every thread, the broadcast's gloo copies and the trainer's
thread included). Modes are run interleaved (every_rank, group_leader,
every_rank, ...) and the report gives, per TP, the median over repeats of each figure per
node and the median (and range) of the per-repeat ratios group_leader / every_rank.

  perf/group_leader.py --dataset DIR [--tp 2,4] [--repeats 5] [--steps 300] [--step-ms 2]
                       [--batch 8] [--block 2048] [--mode sft_packed]

DIR is a dataset the loader reads (e.g. `build/perf/gen_dataset --out DIR --episodes 20000`'s
output, or data/sample). Needs torch (Debian's python3-torch) and the tokenfeed module in the
interpreter that runs it. Run it with nothing else of yours running (`ps`).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from measure import median  # noqa: E402


def worker(argv: list[str]) -> None:
    """One process of a run: argv = [mode, keys_json, steps, step_ms, out]."""
    import torch.distributed as dist

    import tokenfeed
    import tokenfeed.torch as tft

    mode, keys, steps, step_ms, out = argv[0], json.loads(argv[1]), int(argv[2]), float(argv[3]), argv[4]
    dist.init_process_group("gloo")
    tokenfeed.set_logging(False)
    loader = tokenfeed.Loader(dict(keys, data_loading=mode))
    group = tft.data_parallel_group(loader)
    take = (lambda: tft.broadcast_batch(loader, group)) if mode == "group_leader" else (lambda: loader.get_batch())
    for _ in range(20):  # warm-up: pipelines started, pools filled
        take()
    decodes = mode == "every_rank" or loader.parallel_layout["data_leader"]
    if decodes:
        loader.reset_stats()
    dist.barrier()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        batch = take()
        del batch
        end = time.perf_counter() + step_ms / 1000
        while time.perf_counter() < end:
            time.sleep(step_ms / 4000)  # the trainer's step, off the CPU as a GPU step is
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    # The loader's own threads (decoders, admitter): its share of a core over the loop.
    decode = loader.stats()["loader_threads_core_fraction"] * wall if decodes else 0.0
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, {"cpu": cpu, "wall": wall, "decode": decode})
    if dist.get_rank() == 0:
        pathlib.Path(out).write_text(json.dumps(gathered))
    loader.close()
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(tp: int, mode: str, keys: dict, args: argparse.Namespace, tmp: pathlib.Path) -> dict:
    out = tmp / f"{mode}-{tp}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={tp}",
           "--rdzv_backend=static", "--master_addr=127.0.0.1", f"--master_port={free_port()}", "--redirects=1",
           "--tee=2", f"--log_dir={tmp / 'logs'}", __file__, "--worker", mode,
           json.dumps(dict(keys, tensor_parallel_size=tp)), str(args.steps), str(args.step_ms), str(out)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=900)
    ranks = json.loads(out.read_text())
    return {"cpu": sum(r["cpu"] for r in ranks), "decode": sum(r["decode"] for r in ranks),
            "wall": max(r["wall"] for r in ranks)}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--tp", default="2,4")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--step-ms", type=float, default=2.0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--block", type=int, default=2048)
    p.add_argument("--mode", default="sft_packed")
    args = p.parse_args()
    keys = dict(dataset_dir=str(pathlib.Path(args.dataset).resolve()), dataset_mode=args.mode,
                batch_size=args.batch, block_size=args.block, audit_log_dir="")
    print("| TP | CPU s/node of all but the trainer threads (the loaders', gloo's), every_rank | the same, group_leader | ratio | all CPU s/node, "
          "every_rank | the same, group_leader | ratio | 1/TP |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as d:
        tmp = pathlib.Path(d)
        for tp in (int(t) for t in args.tp.split(",")):
            runs = []
            for _ in range(args.repeats):
                runs.append((run(tp, "every_rank", keys, args, tmp), run(tp, "group_leader", keys, args, tmp)))
            cells = []
            for what in ("decode", "cpu"):
                ratios = [g[what] / e[what] for e, g in runs]
                cells += [f"{median(e[what] for e, _ in runs):.3f}", f"{median(g[what] for _, g in runs):.3f}",
                          f"{median(ratios):.3f} ({min(ratios):.3f}..{max(ratios):.3f})"]
            print(f"| {tp} | " + " | ".join(cells) + f" | {1 / tp:.3f} |", flush=True)


if __name__ == "__main__":
    main()
