"""The parallel layout (docs/distributed.md, "Tensor, context and pipeline parallelism"): the
data-parallel rank of each process follows from its global rank, the world size, the
tensor/context/pipeline sizes and parallel_order; every rank of one data-parallel group gets
byte-identical batches, equal to what today's loader gives that data-parallel rank at
world_size = dp_size; with data_loading=group_leader only the leader decodes and
tokenfeed.torch.broadcast_batch hands its batches to the group.

The references here are written from the rule itself (the mixed radix of the order), not
from the loader's code. The torchrun test starts 8 real processes (gloo on the loopback)."""
import hashlib
from pathlib import Path

import numpy as np
import pytest

import tokenfeed
from conftest import base_keys, require_torch, run_torchrun

WORKER = Path(__file__).with_name("layout_worker.py")
MODES = ["sft_episode", "sft_packed", "token_stream"]


def reference_coordinates(rank, world, sizes, order):
    """{dim: coordinate} of `rank`: its digits in the mixed radix of `order`, first fastest."""
    sizes = dict(sizes, dp=world // (sizes["tp"] * sizes["cp"] * sizes["pp"]))
    out, stride = {}, 1
    for dim in order.split("-"):
        out[dim] = (rank // stride) % sizes[dim]
        stride *= sizes[dim]
    return out


def batch_digest(batch):
    h = hashlib.sha256()
    for name, a in sorted(batch.arrays().items()):
        if name == "segments":  # the records' fields, not the padding bytes between them
            a = np.stack([a["row"], a["column"], a["positions"], a["episode"]], axis=1).astype(np.int64)
        h.update(name.encode() + np.ascontiguousarray(a).tobytes())
    h.update(repr((batch.step, batch.epoch, batch.batch_in_epoch, batch.real_rows, batch.real_positions,
                   batch.num_sequences, batch.max_seqlen)).encode())
    return h.hexdigest()


def keys_for(mode, sft_dir, stream_dir, **extra):
    extra = dict(dict(batch_size=2), **extra)
    if mode == "token_stream":
        return base_keys(stream_dir, dataset_mode=mode, token_dtype="uint16", **extra)
    return base_keys(sft_dir, dataset_mode=mode, **extra)


@pytest.mark.parametrize("order", ["tp-cp-dp-pp", "dp-tp-cp-pp", "tp-dp-pp-cp"])
def test_every_rank_knows_its_coordinates_by_the_order(sft_dir, order):
    world, sizes = 16, {"tp": 2, "cp": 2, "pp": 2}
    groups = {}
    for rank in range(world):
        loader = tokenfeed.Loader(base_keys(sft_dir, rank=rank, world_size=world, tensor_parallel_size=2,
                                            context_parallel_size=2, pipeline_parallel_size=2, parallel_order=order))
        layout = loader.parallel_layout
        want = reference_coordinates(rank, world, sizes, order)
        assert (layout["tensor_parallel_rank"], layout["context_parallel_rank"], layout["pipeline_parallel_rank"],
                layout["data_parallel_rank"]) == (want["tp"], want["cp"], want["pp"], want["dp"]), rank
        assert layout["data_parallel_size"] == 2
        assert loader.config["data_parallel_rank"] == str(want["dp"])
        assert loader.config["data_parallel_size"] == "2"
        assert loader.config["context_parallel_rank"] == str(want["cp"])
        groups.setdefault(want["dp"], []).append(rank)
        assert layout["leader_rank"] == min(r for r in range(world)
                                            if reference_coordinates(r, world, sizes, order)["dp"] == want["dp"])
        assert layout["data_leader"] == (layout["leader_rank"] == rank)
        loader.close()
    loader = tokenfeed.Loader(base_keys(sft_dir, rank=0, world_size=world, tensor_parallel_size=2,
                                        context_parallel_size=2, pipeline_parallel_size=2, parallel_order=order))
    assert loader.data_parallel_groups() == [groups[0], groups[1]]


@pytest.mark.parametrize("mode", MODES)
def test_groups_get_identical_batches_and_dp_ranks_todays_slices(sft_dir, stream_dir, mode):
    """tp=2, cp=2, dp=2 in 8 processes (opened here one after another): every rank of a group
    byte-identical, and equal to today's loader at rank dp of world_size 2."""
    steps = 5
    digests = {}
    for rank in range(8):
        loader = tokenfeed.Loader(keys_for(mode, sft_dir, stream_dir, rank=rank, world_size=8,
                                           tensor_parallel_size=2, context_parallel_size=2))
        dp = loader.parallel_layout["data_parallel_rank"]
        digests.setdefault(dp, []).append([batch_digest(b) for b in loader.iter("train", steps=steps)])
        loader.close()
    for dp, per_rank in digests.items():
        assert len(per_rank) == 4
        assert all(d == per_rank[0] for d in per_rank), f"dp group {dp} differs"
        # Today's loader at rank dp of 2, with the same CP padding (sft_packed pads to 2·cp).
        plain = tokenfeed.Loader(keys_for(mode, sft_dir, stream_dir, rank=dp, world_size=2, context_parallel_size=2,
                                          context_parallel_rank=0, data_parallel_rank=dp, data_parallel_size=2))
        assert [batch_digest(b) for b in plain.iter("train", steps=steps)] == per_rank[0]
        plain.close()
    assert digests[0][0] != digests[1][0]


def test_direct_coordinates_win_and_state_moves_across_layouts(sft_dir):
    direct = tokenfeed.Loader(base_keys(sft_dir, rank=5, world_size=6, data_parallel_rank=1, data_parallel_size=2,
                                        tensor_parallel_size=4))
    assert direct.parallel_layout["data_parallel_rank"] == 1
    assert direct.parallel_layout["source"].startswith("data_parallel_rank/data_parallel_size")
    assert direct.data_parallel_groups() == []  # 6 ranks are not a multiple of tp=4: no groups to tell
    plain = tokenfeed.Loader(base_keys(sft_dir, rank=1, world_size=2))
    assert [batch_digest(b) for b in direct.iter("train", steps=3)] == \
        [batch_digest(b) for b in plain.iter("train", steps=3)]
    # A state saved at tp=4 x dp=2 (batch_size 4) loads at dp=4 with the same global batch.
    state = direct.state_dict()
    wider = tokenfeed.Loader(base_keys(sft_dir, rank=3, world_size=4, batch_size=2))
    wider.load_state_dict(state)
    assert wider.get_batch().step == 3


@pytest.mark.parametrize("keys, message", [
    (dict(rank=0, world_size=6, tensor_parallel_size=4), "world_size 6 is not a multiple of"),
    (dict(parallel_order="tp-cp-dp"), "parallel_order"),
    (dict(parallel_order="tp-tp-dp-pp"), "exactly once"),
    (dict(data_parallel_rank=1), "'data_parallel_size' is not"),
    (dict(data_parallel_rank=2, data_parallel_size=2), "data_parallel_rank"),
    (dict(context_parallel_size=2, context_parallel_rank=2), "context_parallel_rank"),
    (dict(tensor_parallel_size=0), "tensor_parallel_size"),
    (dict(rank=0, world_size=3, data_parallel_rank=0, data_parallel_size=3, tensor_parallel_size=2,
          data_loading="group_leader"), "group_leader"),
])
def test_bad_layouts_are_refused_naming_the_numbers(sft_dir, keys, message):
    with pytest.raises(tokenfeed.ConfigError, match=message):
        tokenfeed.Loader(base_keys(sft_dir, **keys))


def test_a_follower_holds_no_pipeline(sft_dir):
    follower = tokenfeed.Loader(base_keys(sft_dir, rank=1, world_size=4, tensor_parallel_size=2,
                                          data_loading="group_leader"))
    assert not follower.parallel_layout["data_leader"] and follower.parallel_layout["leader_rank"] == 0
    with pytest.raises(tokenfeed.UsageError, match="not its data-parallel group's leader"):
        follower.get_batch()
    with pytest.raises(tokenfeed.UsageError, match="group_leader"):
        follower.state_dict()
    assert follower.stats()["batches"] == 0
    leader = tokenfeed.Loader(base_keys(sft_dir, rank=2, world_size=4, tensor_parallel_size=2,
                                        data_loading="group_leader"))
    assert leader.parallel_layout["data_leader"] and leader.get_batch().rows == 4


def test_the_open_line_says_the_layout(sft_dir, capfd):
    tokenfeed.set_logging(True)
    try:
        tokenfeed.Loader(base_keys(sft_dir, rank=5, world_size=8, tensor_parallel_size=2, context_parallel_size=2))
    finally:
        tokenfeed.set_logging(False)
    assert "rank=5 of 8 (config) -> dp 1 of 2 (tp 2, cp 2, pp 1; tp-cp-dp-pp)" in capfd.readouterr().err


# ---- torchrun: 8 real processes ----

BATCH = 2


@pytest.fixture(scope="module")
def torchrun_layouts(sft_dir, stream_dir, tmp_path_factory):
    require_torch()
    tmp = tmp_path_factory.mktemp("layouts")
    cases = []
    for mode in ("sft_packed", "token_stream"):
        for name, layout in (("tp2cp2dp2", dict(tensor_parallel_size=2, context_parallel_size=2)),
                             ("tp4dp2", dict(tensor_parallel_size=4))):
            keys = keys_for(mode, sft_dir, stream_dir, **layout)
            cases.append(dict(name=f"{mode}/{name}", keys=keys, steps=4))
            cases.append(dict(name=f"{mode}/{name}/leader", keys=dict(keys, data_loading="group_leader"), steps=4,
                              broadcast=True))
    # Elastic: the state of tp=4 x dp=2 after 4 steps resumes at tp=2 x dp=4, batch_size 1.
    wide = keys_for("sft_packed", sft_dir, stream_dir, tensor_parallel_size=2, batch_size=1)
    cases.append(dict(name="sft_packed/tp2dp4/resumed", keys=wide, steps=3, resume_from="sft_packed/tp4dp2"))
    return cases, run_torchrun(tmp, WORKER, 8, cases)


def single_process(keys, steps, skip=0):
    """Per step, the rows of one loader with the whole global batch (BATCH x 2)."""
    # The same CP size (sft_packed pads each sequence to a multiple of 2·cp), one process.
    loader = tokenfeed.Loader(dict(keys, rank=0, world_size=1, tensor_parallel_size=1, data_parallel_rank=0,
                                   data_parallel_size=1, context_parallel_rank=0, batch_size=BATCH * 2,
                                   data_loading="every_rank"))
    out = []
    for b in loader.iter("train", steps=skip + steps):
        if len(b.segments):
            rows = [[] for _ in range(b.rows)]
            for seg in b.segments:
                rows[int(seg["row"])].append(int(seg["episode"]))
        else:
            rows = [[int(i)] for i in b.episode_ids]
        out.append(rows)
    loader.close()
    return out[skip:]


@pytest.mark.parametrize("mode", ["sft_packed", "token_stream"])
@pytest.mark.parametrize("layout", ["tp2cp2dp2", "tp4dp2"])
def test_torchrun_groups_identical_and_dp_ranks_cover_the_stream(torchrun_layouts, mode, layout):
    cases, results = torchrun_layouts
    name = f"{mode}/{layout}"
    case = next(c for c in cases if c["name"] == name)
    gathered = results[name]
    expected = single_process(case["keys"], case["steps"])
    by_group = {}
    for g in gathered:
        dp = g["layout"]["data_parallel_rank"]
        assert g["config_dp_rank"] == str(dp) and g["config_dp_size"] == "2"
        by_group.setdefault(dp, []).append(g)
    assert sorted(by_group) == [0, 1]
    for dp, members in by_group.items():
        assert len(members) == 4
        for m in members:  # byte-identical: the same digests, step for step
            assert m["steps"] == members[0]["steps"], f"{name}: rank {m['rank']} differs in dp group {dp}"
        for step, (rows, _) in enumerate(members[0]["steps"]):
            assert rows == expected[step][dp * BATCH:(dp + 1) * BATCH], f"{name}: step {step} dp {dp}"
    # The same through the group's leader and broadcast_batch: equal to every_rank's.
    leader = results[name + "/leader"]
    assert [g["steps"] for g in leader] == [g["steps"] for g in gathered]


def test_torchrun_elastic_resume_from_dp2_to_dp4(torchrun_layouts):
    cases, results = torchrun_layouts
    case = next(c for c in cases if c["name"] == "sft_packed/tp2dp4/resumed")
    expected = single_process(case["keys"], case["steps"], skip=4)  # after the 4 steps of tp4dp2
    for g in results["sft_packed/tp2dp4/resumed"]:
        dp = g["layout"]["data_parallel_rank"]
        assert g["layout"]["data_parallel_size"] == 4
        for step, (rows, _) in enumerate(g["steps"]):
            assert rows == expected[step][dp:dp + 1], f"step {step} dp {dp}"
