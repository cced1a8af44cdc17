"""Data parallelism with a real launcher: torchrun (torch.distributed.run, from the torch the
tests use) starts 4 processes with the gloo backend on the loopback interface; each opens a
loader from the same config, with rank and world_size taken from the launcher's
environment, and takes a full epoch. The rows, gathered with all_gather_object, are
disjoint across ranks, cover every kept episode (or window) exactly once, and equal the
single-process stream of the same global batch, sliced."""
from pathlib import Path

import pytest

import tokenfeed
from conftest import base_keys, require_torch, run_torchrun

WORLD = 4
BATCH = 3  # per rank: a global batch of 12
WORKER = Path(__file__).with_name("distributed_worker.py")


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


MODES = ["sft_episode", "sft_packed", "token_stream"]


def case_keys(mode, sft_dir, stream_dir):
    # drop_last=false: an epoch ends on a batch boundary (fill rows after its last episode
    # or window), so one epoch holds every kept episode exactly once. No rank or world_size:
    # the loaders take RANK and WORLD_SIZE from torchrun.
    if mode == "token_stream":
        # Epoch sampling, so that "every window exactly once" is defined.
        return base_keys(stream_dir, dataset_mode=mode, batch_size=BATCH, batch_sampling_mode="epoch",
                         token_dtype="uint16", epoch_drop_last=False)
    return base_keys(sft_dir, dataset_mode=mode, batch_size=BATCH, epoch_drop_last=False)


@pytest.fixture(scope="module")
def torchrun_results(sft_dir, tmp_path_factory):
    require_torch()
    import numpy as np
    tmp = tmp_path_factory.mktemp("torchrun")
    stream_dir = tmp / "stream"
    stream_dir.mkdir()
    np.arange(1, 40 * 65 + 1, dtype=np.uint16).tofile(stream_dir / "train.bin")  # 40 windows of 65 tokens
    cases = []
    for mode in MODES:
        keys = case_keys(mode, sft_dir, stream_dir)
        probe = tokenfeed.Loader(dict(keys, batch_size=BATCH * WORLD, rank=0, world_size=1))
        cases.append(dict(name=mode, keys=keys, steps=probe.batches_per_epoch()))
        probe.close()
    return cases, run_torchrun(tmp, WORKER, WORLD, cases)


@pytest.mark.parametrize("mode", MODES)
def test_torchrun_four_ranks_take_one_epoch_disjoint_and_complete(torchrun_results, mode):
    cases, results = torchrun_results
    case = next(c for c in cases if c["name"] == mode)
    keys, steps, gathered = case["keys"], case["steps"], results[mode]
    assert steps > 0
    probe = tokenfeed.Loader(dict(keys, rank=0, world_size=1))
    info = probe.info("train")
    kept = info["windows"] if mode == "token_stream" else info["kept_episodes"]

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
