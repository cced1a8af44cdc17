"""Batch-size schedules and a sequence-length curriculum from Python: the dict config's `shape_schedule` read by the same
schema as the XML's, each batch's shape and loader.batch_shape(step), the rows equal to the
unscheduled stream of single rows consumed in sequence, and exact resume."""
import numpy as np
import pytest

import tokenfeed

from conftest import base_keys

SCHEDULE = [{"until_step": 3, "global_batch_size": 2}, {"until_tokens": 1000, "global_batch_size": 6}, {}]


def resumed_after(keys, steps):
    """A loader over `keys` that loaded the state another one saved after `steps` steps."""
    first = tokenfeed.Loader(keys)
    for _ in first.iter(steps=steps):
        pass
    resumed = tokenfeed.Loader(keys)
    resumed.load_state_dict(first.state_dict())
    return resumed


def test_a_warmup_takes_the_stream_in_sequence(stream_dir):
    # token_stream's default random windows: global row g is the same draw at any batch size.
    single = tokenfeed.Loader(base_keys(stream_dir, batch_size=1))
    singles = [b.tokens[0].copy() for b in single.iter(steps=60)]
    loader = tokenfeed.Loader(base_keys(stream_dir, shape_schedule=SCHEDULE))
    # 3 steps of 2 rows (384 positions), then 6 rows (384 a step) until 1000 positions are
    # trained: 384 + 2 x 384 = 1152 at step 5; then batch_size 4.
    expected_rows = [2, 2, 2, 6, 6, 4, 4]
    rows = []
    for step, b in enumerate(loader.iter(steps=len(expected_rows))):
        assert b.shape == (expected_rows[step], 64) == loader.batch_shape(step)
        assert b.tokens.shape == b.labels.shape == (b.rows, 64)
        rows.extend(b.tokens[r].copy() for r in range(b.rows))
    assert len(rows) == sum(expected_rows)
    for got, want in zip(rows, singles):
        np.testing.assert_array_equal(got, want)
    assert loader.config["shape_schedule"] == (
        "until_step=3:global_batch_size=2 until_tokens=1000:global_batch_size=6 end")


def test_resume_inside_and_across_stages(sft_dir):
    keys = base_keys(sft_dir, shape_schedule=SCHEDULE)
    whole = [b.episode_ids.copy() for b in tokenfeed.Loader(keys).iter(steps=8)]
    for at in (2, 3, 5):
        resumed = resumed_after(keys, at)
        for got, want in zip(resumed.iter(steps=8 - at), whole[at:]):
            np.testing.assert_array_equal(got.episode_ids, want)


@pytest.mark.parametrize("schedule, message", [
    ([{"until_step": 3, "rows": 4}, {}], "shape_schedule stage 0: unknown key 'rows'"),
    ([{"until_step": 3, "global_batch_size": 0}, {}], "shape_schedule stage 0: config key 'global_batch_size' must be > 0"),
    ([{"global_batch_size": 8}, {"global_batch_size": 4}], "shape_schedule stage 0 has no until_step"),
    ([{"until_step": "soon"}, {}], "shape_schedule stage 0: config key 'until_step'"),
    ("until_step=3", "shape_schedule"),
])
def test_bad_schedules_name_the_stage(sft_dir, schedule, message):
    with pytest.raises(tokenfeed.ConfigError, match=message):
        tokenfeed.Loader(base_keys(sft_dir, shape_schedule=schedule))


def test_random_split_pieces_are_drawn_at_each_stage_length(sft_written):
    # sft_episode, truncation=split, random draws: global row g of a step of block size T is
    # a piece of T + 1 tokens of its document (from a multiple of T), the one the unscheduled
    # single-row random stream at block_size=T draws at row g.
    root, written = sft_written
    train = written["train"]
    schedule = [{"until_step": 2}, {"until_step": 4, "block_size": 64, "global_batch_size": 8},
                {"block_size": 16, "global_batch_size": 6}]
    keys = base_keys(root, dataset_mode="sft_episode", truncation="split", batch_sampling_mode="random",
                     block_size=32, shape_schedule=schedule)
    expected = [(4, 32), (4, 32), (8, 64), (8, 64), (6, 16), (6, 16)]
    singles = {}
    for block in (16, 32, 64):
        single = tokenfeed.Loader(base_keys(root, dataset_mode="sft_episode", truncation="split",
                                            batch_sampling_mode="random", block_size=block, batch_size=1))
        singles[block] = [(int(b.episode_ids[0]), b.tokens[0].copy()) for b in single.iter(steps=40)]
    loader = tokenfeed.Loader(keys)
    g, cut = 0, set()
    for step, b in enumerate(loader.iter(steps=len(expected))):
        assert b.shape == expected[step] == loader.batch_shape(step)
        assert b.tokens.shape == b.labels.shape == b.position_ids.shape == expected[step]
        T = b.cols
        for r in range(b.rows):
            doc = int(b.episode_ids[r])
            ids = np.asarray(train[doc][0])
            real = T if b.position_ids[r][-1] == T - 1 else int(np.argmax(b.position_ids[r][1:] == 0)) + 1
            starts = [o for o in range(0, len(ids) - 1, T)
                      if np.array_equal(ids[o:o + real + 1][:T], b.tokens[r][:min(real + 1, T)])]
            assert starts, (step, r)
            cut.update(T for o in starts if o > 0)
            assert doc == singles[T][g][0]
            np.testing.assert_array_equal(b.tokens[r], singles[T][g][1])
            g += 1
    assert cut == {16, 32, 64}  # some row at each length is a later piece of its document
    # A resume at a boundary continues the same stream.
    whole = [b.tokens.copy() for b in tokenfeed.Loader(keys).iter(steps=6)]
    for at in (2, 4):
        for got, want in zip(resumed_after(keys, at).iter(steps=6 - at), whole[at:]):
            np.testing.assert_array_equal(got.tokens, want)


def test_split_documents_continue_across_each_stage_length(sft_written):
    # sft_episode, truncation=split: 3 steps of rows of 32 positions, 3 of 64 (8 rows), then 32 again. The
    # documents of epoch 0's numpy order are cut in order, a row of length T holding the next T + 1
    # tokens from the token reached, across the boundaries too; a resume at each step continues it.
    root, written = sft_written
    train = written["train"]
    schedule = [{"until_step": 3}, {"until_step": 6, "block_size": 64, "global_batch_size": 8}, {}]
    keys = base_keys(root, dataset_mode="sft_episode", truncation="split", block_size=32, shape_schedule=schedule)
    lengths = [32] * 3 * 4 + [64] * 3 * 8 + [32] * 4 * 4  # each row's length, over 10 steps
    want, order = [], np.random.RandomState(1337).permutation(len(train))
    for doc in order:
        ids, o = train[doc][0], 0
        while o + 1 < len(ids) and len(want) < len(lengths):
            T = lengths[len(want)]
            want.append((doc, o, T, ids[o:o + min(len(ids) - o, T + 1)][:T]))
            o += T
    assert len(want) == len(lengths)
    # Some document is continued across a boundary, from the token reached, at the new length.
    assert any(a[0] == b[0] and b[1] > 0 and a[2] != b[2] for a, b in zip(want, want[1:]))
    want = [(doc, tokens) for doc, _, _, tokens in want]
    rows = []
    for step, b in enumerate(tokenfeed.Loader(keys).iter(steps=10)):
        assert b.shape == ((8, 64) if 3 <= step < 6 else (4, 32))
        rows.extend((int(b.episode_ids[r]), b.tokens[r].copy()) for r in range(b.rows))
    for (doc, tokens), (got_doc, got) in zip(want, rows):
        assert got_doc == doc
        np.testing.assert_array_equal(got[:len(tokens)], tokens)
    for at in range(1, 9):
        resumed = resumed_after(keys, at)
        again = [(int(b.episode_ids[r]), b.tokens[r].copy())
                 for b in resumed.iter(steps=10 - at) for r in range(b.rows)]
        skip = 4 * at if at <= 3 else 12 + (at - 3) * 8 if at <= 6 else 36 + (at - 6) * 4
        for (doc, tokens), (got_doc, got) in zip(rows[skip:], again):
            assert got_doc == doc
            np.testing.assert_array_equal(got, tokens)


def test_packed_split_documents_are_cut_at_the_length_of_each_row(sft_written):
    # sft_packed, truncation=split: each document is cut while packed, a piece of a row of length T holding
    # at most T + 1 tokens from the token reached; a document's pieces come in order, so over epoch 0 each
    # document's label positions are covered once, in order, across the boundaries too.
    root, written = sft_written
    train = written["train"]
    schedule = [{"until_step": 3}, {"until_step": 6, "block_size": 64, "global_batch_size": 8},
                {"block_size": 16, "global_batch_size": 16}]
    keys = base_keys(root, dataset_mode="sft_packed", truncation="split", block_size=32, shape_schedule=schedule,
                     pack_lookahead=8)
    total = sum(len(train[d][0]) - 1 for d in range(len(train)))
    reached, placed, cut_at = {}, 0, set()
    loader = tokenfeed.Loader(keys)
    assert loader.batch_shape(4) == (8, 64) and loader.batch_shape(7) == (16, 16)
    for step, b in enumerate(loader.iter(steps=400)):
        T = 64 if 3 <= step < 6 else 32 if step < 3 else 16
        assert b.shape == ((8, 64) if 3 <= step < 6 else (4, 32) if step < 3 else (16, 16))
        for s in sorted(b.segments, key=lambda s: (s["row"], s["column"])):
            doc, n = int(s["episode"]), int(s["positions"])
            ids, o = train[doc][0], reached.get(doc, 0)
            assert 1 <= n <= T
            row, column = int(s["row"]), int(s["column"])
            np.testing.assert_array_equal(b.tokens[row, column:column + n], ids[o:o + n])
            if o > 0:
                cut_at.add(T)
            reached[doc] = o + n
            placed += n
            if placed == total:
                break
        if placed >= total:
            break
    assert placed == total
    assert all(reached[d] == len(train[d][0]) - 1 for d in range(len(train)))
    assert cut_at == {16, 32, 64}  # documents continued at every length
    # A resume at a step inside each stage continues the run's batches.
    whole = [b.tokens.copy() for b in tokenfeed.Loader(keys).iter(steps=10)]
    for at in (2, 3, 5, 7):
        again = [b.tokens.copy() for b in resumed_after(keys, at).iter(steps=10 - at)]
        for want, got in zip(whole[at:], again):
            np.testing.assert_array_equal(got, want)


def episodes(segments):
    """The episode ids of a batch's rows, row after row."""
    return [int(s["episode"]) for s in sorted(segments, key=lambda s: (s["row"], s["column"]))]


def packed_steps(loader, steps):
    """Each batch's shape and a copy of its segments."""
    return [(b.shape, b.segments.copy()) for b in loader.iter(steps=steps)]


def test_sft_packed_rows_take_each_stage_length(sft_dir):
    # 4 rows of 64 positions (the key's) for 3 steps, 4 of 128 for 2, then 16 of 32: every row holds its
    # episodes at its own length, each episode once an epoch, and a resume at each step
    # continues the same stream.
    keys = base_keys(sft_dir, dataset_mode="sft_packed",
                     shape_schedule=[{"until_step": 3}, {"until_step": 5, "block_size": 128},
                                     {"block_size": 32, "global_batch_size": 16}])
    loader = tokenfeed.Loader(keys)
    stream = []
    for step, (shape, segments) in enumerate(packed_steps(loader, 40)):
        cols = 64 if step < 3 else 128 if step < 5 else 32
        assert shape == (4 if step < 5 else 16, cols) == loader.batch_shape(step)
        assert all(s["column"] + s["positions"] <= cols for s in segments)
        stream.extend(episodes(segments))
    kept = loader.info("train")["kept_episodes"]
    assert len(stream) > kept
    assert len(set(stream[:kept])) == kept
    whole = [episodes(segments) for _, segments in packed_steps(tokenfeed.Loader(keys), 8)]
    for at in range(1, 7):
        resumed = resumed_after(keys, at)
        assert [episodes(segments) for _, segments in packed_steps(resumed, 8 - at)] == whole[at:]


def test_sft_episode_rows_take_each_stage_length(sft_dir):
    # Steps 0-2 at block_size 64 (the key's), then 128: the same episodes in the epoch's
    # order, each row its episode at the batch's length.
    keys = base_keys(sft_dir, dataset_mode="sft_episode", shape_schedule=[{"until_step": 3}, {"block_size": 128}])
    loader = tokenfeed.Loader(keys)
    batches = [(b.episode_ids.copy(), b.tokens.copy()) for b in loader.iter(steps=5)]
    for step, (ids, tokens) in enumerate(batches):
        cols = 64 if step < 3 else 128
        assert tokens.shape == (4, cols) == loader.batch_shape(step)
        at_length = tokenfeed.Loader(base_keys(sft_dir, dataset_mode="sft_episode", block_size=cols))
        want = [(b.episode_ids.copy(), b.tokens.copy()) for b in at_length.iter(steps=step + 1)][step]
        np.testing.assert_array_equal(ids, want[0])
        np.testing.assert_array_equal(tokens, want[1])


def test_inspect_reports_each_stage(stream_dir):
    # The schedule above over random windows (no epochs): stage 1 from step 3, stage 2 from
    # step 5 (1000 positions reached), the rows and positions before each.
    report = tokenfeed.inspect(base_keys(stream_dir, shape_schedule=SCHEDULE), steps=20)
    schedule = report["shape_schedule"]
    assert (schedule["steps"], schedule["rank"], schedule["data_parallel_size"]) == (20, 0, 1)
    stages = [(s["first_step"], s["end_step"], s["global_batch_size"], s["rows"], s["block_size"],
               s["rows_before"], s["tokens_before"]) for s in schedule["stages"]]
    assert stages == [(0, 3, 2, 2, 64, 0, 0), (3, 5, 6, 6, 64, 6, 384), (5, None, 4, 4, 64, 18, 1152)]
    assert [s["reached"] for s in schedule["stages"]] == [
        {"epoch": None, "batch_in_epoch": step, "unit": None, "offset": None} for step in (0, 3, 5)]
    # A stage from step N on is not reached in N steps.
    early = tokenfeed.inspect(base_keys(stream_dir, shape_schedule=SCHEDULE), steps=5)["shape_schedule"]
    assert early["stages"][2]["reached"] is None
    with pytest.raises(tokenfeed.UsageError, match="no mixture and no shape_schedule"):
        tokenfeed.inspect(base_keys(stream_dir), steps=5)


def test_a_sequence_length_curriculum_draws_windows_at_each_length(stream_dir):
    # Random windows (token_stream's default): global row g of a stage of block size T is
    # row g of the unscheduled single-row stream at T.
    schedule = [{"until_step": 2, "block_size": 32}, {"until_step": 4, "global_batch_size": 6}, {"block_size": 128}]
    singles = {}
    for block in (32, 64, 128):
        single = tokenfeed.Loader(base_keys(stream_dir, batch_size=1, block_size=block))
        singles[block] = [b.tokens[0].copy() for b in single.iter(steps=30)]
    loader = tokenfeed.Loader(base_keys(stream_dir, shape_schedule=schedule))
    expected = [(4, 32), (4, 32), (6, 64), (6, 64), (4, 128), (4, 128)]
    row = 0
    for step, b in enumerate(loader.iter(steps=len(expected))):
        assert b.shape == expected[step] == loader.batch_shape(step)
        assert b.tokens.shape == b.labels.shape == b.position_ids.shape == expected[step]
        for r in range(b.rows):
            np.testing.assert_array_equal(b.tokens[r], singles[b.cols][row])
            row += 1
    report = tokenfeed.inspect(base_keys(stream_dir, shape_schedule=schedule), steps=10)["shape_schedule"]
    assert [(s["block_size"], s["tokens_before"]) for s in report["stages"]] == [
        (32, 0), (64, 2 * 4 * 32), (128, 2 * 4 * 32 + 2 * 6 * 64)]
# ---- A mixture under a batch-size schedule ----

# Global batches 4, 8, 12 (steps 0-2, 3-6, then for ever): the rows before step s.
MIX_SCHEDULE = [{"until_step": 3, "global_batch_size": 4}, {"until_step": 7, "global_batch_size": 8},
                {"global_batch_size": 12}]


def rows_before(step):
    return 4 * step if step <= 3 else 12 + 8 * (step - 3) if step <= 7 else 44 + 12 * (step - 7)


def mixture_keys(sft_dir, stream_dir, stage_ends, **extra):
    keys = dict(batch_size=1, block_size=64, audit_log_dir="", prefetch_depth=2, decode_threads=1,
                mixture=[dict(name="chat", dataset_dir=str(sft_dir), weight=3),
                         dict(name="web", dataset_dir=str(stream_dir), weight=1, dataset_mode="token_stream")],
                stages=[dict(until_step=stage_ends[0]), dict(until_step=stage_ends[1], weights={"web": 2}),
                        dict(weights={"chat": 1, "web": 0.5})])
    keys.update(extra)
    return keys


def mixture_rows(loaders, steps):
    """(source, tokens) of each row of `steps` steps over `loaders` (rank order within a step)."""
    rows = []
    for _ in range(steps):
        for loader in loaders:
            b = loader.get_batch()
            assert b.shape == loader.batch_shape(b.step)
            rows.extend((int(b.source_ids[r]), b.tokens[r].tobytes()) for r in range(b.rows))
    return rows


def test_a_mixture_under_a_ramp_is_the_single_row_mixture_in_sequence(sft_dir, stream_dir):
    # The reference: one row a step, the mixture's stages (at steps 5 and 9) moved to the
    # rows the ramp takes before them, and a weight change at step 4 (inside the ramp's
    # second stage) likewise.
    single = tokenfeed.Loader(mixture_keys(sft_dir, stream_dir, (rows_before(5), rows_before(9))))
    single.set_mixture_weights({"chat": 1}, at_step=rows_before(4))
    whole = mixture_rows([single], rows_before(12))

    def ramped(world=1, rank=0):
        loader = tokenfeed.Loader(mixture_keys(sft_dir, stream_dir, (5, 9), shape_schedule=MIX_SCHEDULE,
                                               world_size=world, rank=rank))
        loader.set_mixture_weights({"chat": 1}, at_step=4)
        return loader

    assert mixture_rows([ramped()], 12) == whole
    ranks = [ramped(2, 0), ramped(2, 1)]
    assert [r.batch_shape(3) for r in ranks] == [(4, 64), (4, 64)]
    assert mixture_rows(ranks, 12) == whole
    # Resumed at every step from 2 ranks onto 4.
    for at in range(12):
        first = [ramped(2, 0), ramped(2, 1)]
        assert mixture_rows(first, at) == whole[:rows_before(at)]
        state = first[0].state_dict()
        resumed = []
        for rank in range(4):
            loader = tokenfeed.Loader(mixture_keys(sft_dir, stream_dir, (5, 9), shape_schedule=MIX_SCHEDULE,
                                                   world_size=4, rank=rank))
            loader.load_state_dict(state)
            resumed.append(loader)
        assert mixture_rows(resumed, 12 - at) == whole[rows_before(at):], at


def test_val_has_its_own_shape_from_the_dict(sft_dir):
    # "val.batch_size" / "val.block_size": val's batches are those of a loader keyed at that
    # shape, train's keep the keys' (and the schedule's) shape.
    keys = base_keys(sft_dir, shape_schedule=SCHEDULE, **{"val.batch_size": 6, "val.block_size": 96,
                                                         "val.epoch_shuffle": False})
    loader = tokenfeed.Loader(keys)
    assert loader.batch_shape(0, split="val") == (6, 96)
    assert loader.batch_shape(0) == (2, 64)
    assert loader.config["val.batch_size"] == "6" and loader.config["val.block_size"] == "96"
    keyed = tokenfeed.Loader(base_keys(sft_dir, batch_size=6, block_size=96, **{"val.epoch_shuffle": False}))
    for got, want in zip(loader.iter("val", steps=3), keyed.iter("val", steps=3)):
        assert got.shape == (6, 96)
        np.testing.assert_array_equal(got.episode_ids, want.episode_ids)
        np.testing.assert_array_equal(got.tokens, want.tokens)
        np.testing.assert_array_equal(got.labels, want.labels)
    with pytest.raises(tokenfeed.ConfigError, match="val.block_size"):
        tokenfeed.Loader(base_keys(sft_dir, **{"val.block_size": 0}))


def test_epoch_windows_under_a_curriculum_cut_the_units_in_order(stream_dir):
    # Epoch windows: the epoch's units are the windows at the longest length (128 + 1
    # tokens), here unshuffled, so the unscheduled loader at block_size=128 lists them; a
    # stage of block size 32 cuts each into rows of 33 tokens (33, 33, 33, then 30: a
    # partial row of 29 targets, padded), and every token is in one row, in order.
    keys = dict(batch_sampling_mode="epoch", epoch_shuffle=False)
    whole = tokenfeed.Loader(base_keys(stream_dir, block_size=128, **keys))
    units = [np.append(b.tokens[r], b.labels[r, -1]) for b in whole.iter(steps=6) for r in range(b.rows)]
    schedule = [{"until_step": 3, "block_size": 32}, {"block_size": 128}]
    loader = tokenfeed.Loader(base_keys(stream_dir, shape_schedule=schedule, **keys))
    pieces = []
    for step, b in enumerate(loader.iter(steps=6)):
        assert b.shape == ((4, 32) if step < 3 else (4, 128)) == loader.batch_shape(step)
        for r in range(b.rows):
            real = int((b.labels[r] != -100).sum())
            last = b.tokens[r, real] if real < b.cols else b.labels[r, -1]
            pieces.append(np.append(b.tokens[r, :real], last))
            assert (b.labels[r, real:] == -100).all() and (b.token_weights[r, real:] == 0).all()
    assert [len(p) for p in pieces[:4]] == [33, 33, 33, 30]
    np.testing.assert_array_equal(np.concatenate(pieces), np.concatenate(units[:3 + 12]))
    stages = tokenfeed.inspect(base_keys(stream_dir, shape_schedule=schedule, **keys), steps=5)["shape_schedule"]
    assert [(s["reached"]["unit"], s["reached"]["offset"]) for s in stages["stages"]] == [(0, 0), (3, 0)]


def test_a_packed_mixture_under_a_curriculum_gives_each_source_its_own_rows(sft_dir):
    # Two packed sources (the same episodes, two epoch seeds) under 64, then 128, then 32
    # positions a row. The reference: each source alone, one row a step, its stages ending at
    # its rows among the global rows before each boundary (counted from the unscheduled
    # single-row mixture's picks); row g of the run is then its source's next row.
    schedule = [{"until_step": 3}, {"until_step": 7, "block_size": 128}, {"block_size": 32}]
    sources = [dict(name="a", dataset_dir=str(sft_dir), weight=2),
               dict(name="b", dataset_dir=str(sft_dir), weight=1, epoch_seed=9)]
    keys = dict(batch_size=2, block_size=64, audit_log_dir="", prefetch_depth=2, decode_threads=1,
                dataset_mode="sft_packed", mixture=sources)
    steps, rows_before = 10, lambda step: 2 * step
    single = tokenfeed.Loader(dict(keys, batch_size=1))
    picks = [int(b.source_ids[0]) for b in single.iter(steps=rows_before(steps))]
    alone = []
    for i, source in enumerate(sources):
        ends = [picks[:rows_before(boundary)].count(i) for boundary in (3, 7)]
        own = {k: v for k, v in source.items() if k not in ("name", "weight")}
        plain = {k: v for k, v in keys.items() if k != "mixture"}
        loader = tokenfeed.Loader(dict(plain, batch_size=1, **own, shape_schedule=[
            {"until_step": ends[0]}, {"until_step": ends[1], "block_size": 128}, {"block_size": 32}]))
        alone.append([b.tokens[0].tobytes() for b in loader.iter(steps=picks.count(i))])
    taken = [0, 0]
    expected = []
    for s in picks:
        expected.append((s, alone[s][taken[s]]))
        taken[s] += 1
    loader = tokenfeed.Loader(dict(keys, shape_schedule=schedule))
    assert [loader.batch_shape(step) for step in (2, 3, 7)] == [(2, 64), (2, 128), (2, 32)]
    assert mixture_rows([loader], steps) == expected
