"""Data parallelism with a real launcher: torchrun (torch.distributed.run, from the torch the
tests use) starts 4 processes with the gloo backend on the loopback interface; each opens a
loader from the same config, with rank and world_size taken from the launcher's
environment, and takes a full epoch. The rows, gathered with all_gather_object, are
disjoint across ranks, cover every kept episode (or window) exactly once, and equal the
single-process stream of the same global batch, sliced."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import tokenfeed
from conftest import base_keys, require_torch

WORLD = 4
BATCH = 3  # per rank: a global batch of 12
WORKER = Path(__file__).with_name("distributed_worker.py")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def single_process_rows(keys, steps):
    """Per step, the global batch's rows as the worker reports them, from one loader of batch 12."""
    loader = tokenfeed.Loader(dict(keys, batch_size=BATCH * WORLD, rank=0, world_size=1))
    out = []
    for b in loader.iter("train", steps=steps):
        if len(b.segments):
            rows = [[] for _ in range(b.episode_ids.shape[0])]
            for seg in b.segments:
                rows[int(seg["row"])].append(int(seg["episode"]))
        else:
            rows = [[int(i)] for i in b.episode_ids]
        out.append(rows)
    return out


def run_torchrun(tmp_path, keys, steps):
    out = tmp_path / "gathered.json"
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo on the loopback interface
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={WORLD}",
           "--rdzv_backend=static", "--master_addr=127.0.0.1", f"--master_port={free_port()}",
           str(WORKER), json.dumps(keys), str(steps), str(out)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, f"torchrun failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return json.loads(out.read_text())


@pytest.mark.parametrize("mode", ["sft_episode", "sft_packed", "token_stream"])
def test_torchrun_four_ranks_take_one_epoch_disjoint_and_complete(sft_dir, tmp_path, mode):
    require_torch()
    if mode == "token_stream":
        # Epoch sampling, so that "every window exactly once" is defined: 40 windows of 65 tokens.
        import numpy as np
        stream = tmp_path / "stream"
        stream.mkdir()
        np.arange(1, 40 * 65 + 1, dtype=np.uint16).tofile(stream / "train.bin")
        keys = base_keys(stream, dataset_mode=mode, batch_size=BATCH, batch_sampling_mode="epoch",
                         token_dtype="uint16", epoch_drop_last=False)
    else:
        # drop_last=false: the epoch ends on a batch boundary (fill rows after the last
        # episode), so one epoch holds every kept episode exactly once.
        keys = base_keys(sft_dir, dataset_mode=mode, batch_size=BATCH, epoch_drop_last=False)
    # No rank or world_size: the loaders take RANK and WORLD_SIZE from torchrun.
    probe = tokenfeed.Loader(dict(keys, batch_size=BATCH * WORLD, rank=0, world_size=1))
    info = probe.info("train")
    kept = info["windows"] if mode == "token_stream" else info["kept_episodes"]
    steps = probe.batches_per_epoch()
    assert steps > 0

    gathered = run_torchrun(tmp_path, keys, steps)
    assert [g["rank"] for g in gathered] == list(range(WORLD))
    assert [(g["config_rank"], g["config_world_size"]) for g in gathered] == [(r, WORLD) for r in range(WORLD)]

    expected = single_process_rows(keys, steps)
    seen = []
    for step in range(steps):
        for g in gathered:
            r = g["rank"]
            rows = g["steps"][step]
            assert rows == expected[step][r * BATCH:(r + 1) * BATCH], f"step {step} rank {r}"
            seen.extend(i for row in rows for i in row if i >= 0)
    per_rank = [{i for step in g["steps"] for row in step for i in row if i >= 0} for g in gathered]
    for a in range(WORLD):
        for b in range(a + 1, WORLD):
            assert not (per_rank[a] & per_rank[b]), f"ranks {a} and {b} share ids"
    # Every kept episode (window) exactly once; the last batch's fill rows (-1) aside.
    assert len(seen) == len(set(seen)) == kept
