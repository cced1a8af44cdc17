"""Context parallelism through the module: batch.cu_seqlens_padded, the padding of each
sequence to a multiple of 2·cp, context_parallel_split's share of each row, to_torch and
`tokenfeed dump`'s cu_seqlens.npy and cu_seqlens_padded.npy, against references written
here (docs/batch-contract.md, "Context parallelism")."""
import numpy as np
import pytest

import tokenfeed
from conftest import SPECIAL, base_keys, require_torch, run_cli, write_config

PAD = SPECIAL["eot"]  # the test dataset's pad id (its metadata's eot_token_id)


def packed_keys(sft_dir, cp, **extra):
    # One data-parallel group of cp ranks (tp-cp-dp-pp: the global rank is the CP rank).
    keys = base_keys(sft_dir, dataset_mode="sft_packed", use_loss_mask=True, context_parallel_size=cp,
                     world_size=cp, rank=0)
    keys.update(extra)
    return keys


def batches(keys, n):
    loader = tokenfeed.Loader(keys)
    return [{k: v.copy() for k, v in b.arrays().items()} | {"cols": b.cols, "max_seqlen": b.max_seqlen,
                                                             "real_positions": b.real_positions}
            for b in loader.iter("train", steps=n)]


def reference_share(whole, offsets, cp, rank):
    """CP rank `rank`'s share of the whole rows (B x T): per sequence [offsets[i],
    offsets[i+1]) of the flattened rows, its 2·cp chunks r and 2·cp-1-r, in row order."""
    rows, cols = whole.shape
    flat = whole.reshape(-1)
    out = [[] for _ in range(rows)]
    for begin, end in zip(offsets[:-1], offsets[1:]):
        chunk = (end - begin) // (2 * cp)
        assert chunk * 2 * cp == end - begin
        for c in (rank, 2 * cp - 1 - rank):
            out[begin // cols].extend(flat[begin + c * chunk:begin + (c + 1) * chunk])
    return np.array(out, dtype=whole.dtype)


def test_without_context_parallelism_cu_seqlens_padded_is_cu_seqlens(sft_dir):
    for mode in ("sft_episode", "sft_packed"):
        loader = tokenfeed.Loader(base_keys(sft_dir, dataset_mode=mode, use_loss_mask=True))
        batch = loader.get_batch()
        assert batch.cu_seqlens_padded.dtype == np.int32
        np.testing.assert_array_equal(batch.cu_seqlens_padded, batch.cu_seqlens)
        assert "cu_seqlens_padded" in batch.arrays()


@pytest.mark.parametrize("cp", [2, 3])
def test_packed_sequences_are_padded_to_a_multiple_of_2cp(sft_dir, cp):
    T = 96  # a multiple of 4 and 6
    for b in batches(packed_keys(sft_dir, cp, block_size=T), 4):
        real, padded = b["cu_seqlens"], b["cu_seqlens_padded"]
        lengths, spans = np.diff(real), np.diff(padded)
        assert len(real) == len(padded) and padded[-1] == 4 * T
        assert np.all(spans % (2 * cp) == 0) and np.all(spans >= lengths) and np.all(spans - lengths < 2 * cp)
        assert b["max_seqlen"] == lengths.max()
        tokens, labels = b["tokens"].reshape(-1), b["labels"].reshape(-1)
        weights, positions = b["token_weights"].reshape(-1), b["position_ids"].reshape(-1)
        # Each episode's segment starts a sequence; its padding follows it.
        starts = {s["row"] * T + s["column"]: s["positions"] for s in b["segments"]}
        real_positions = 0
        for i, begin in enumerate(padded[:-1]):
            n, span = lengths[i], spans[i]
            if begin in starts:
                assert starts[begin] == n
                real_positions += n
            else:  # a row's trailing padding: real and padded alike, positions from 0
                assert n == span
            pad = slice(begin + n, begin + span)
            assert np.all(tokens[pad] == PAD) and np.all(labels[pad] == -100) and np.all(weights[pad] == 0)
            np.testing.assert_array_equal(positions[begin:begin + span], np.arange(span))
        assert b["real_positions"] == real_positions


@pytest.mark.parametrize("cp", [2, 3])
def test_each_rank_gets_its_share_and_the_shares_make_the_rows(sft_dir, cp):
    T = 96
    whole = batches(packed_keys(sft_dir, cp, block_size=T), 3)
    shares = [batches(packed_keys(sft_dir, cp, block_size=T, context_parallel_split=True, rank=r), 3)
              for r in range(cp)]
    for k, w in enumerate(whole):
        for rank in range(cp):
            s = shares[rank][k]
            assert s["cols"] == T // cp and s["tokens"].shape == (4, T // cp)
            for name in ("tokens", "labels", "token_weights", "position_ids"):
                np.testing.assert_array_equal(s[name], reference_share(w[name], w["cu_seqlens_padded"], cp, rank),
                                              err_msg=f"batch {k} rank {rank} {name}")
            for name in ("cu_seqlens", "cu_seqlens_padded", "episode_ids"):
                np.testing.assert_array_equal(s[name], w[name])
            assert s["real_positions"] == w["real_positions"]
        # Put back together, chunk by chunk, the shares are the whole rows.
        rebuilt = np.zeros(4 * T, dtype=np.int64)
        taken = [0] * 4
        for begin, end in zip(w["cu_seqlens_padded"][:-1], w["cu_seqlens_padded"][1:]):
            row, chunk = begin // T, (end - begin) // (2 * cp)
            for rank in range(cp):
                own = shares[rank][k]["tokens"][row, taken[row]:taken[row] + 2 * chunk]
                rebuilt[begin + rank * chunk:begin + (rank + 1) * chunk] = own[:chunk]
                rebuilt[begin + (2 * cp - 1 - rank) * chunk:begin + (2 * cp - rank) * chunk] = own[chunk:]
            taken[row] += 2 * chunk
        np.testing.assert_array_equal(rebuilt.reshape(4, T), w["tokens"])


def test_to_torch_carries_cu_seqlens_padded(sft_dir):
    torch = require_torch()
    loader = tokenfeed.Loader(packed_keys(sft_dir, 2, block_size=96, context_parallel_split=True, rank=1))
    differ = 0
    for batch in loader.iter("train", steps=6):
        tensors = batch.to_torch()
        assert tensors["cu_seqlens_padded"].dtype == torch.int32
        np.testing.assert_array_equal(tensors["cu_seqlens_padded"].numpy(), batch.cu_seqlens_padded)
        np.testing.assert_array_equal(tensors["cu_seqlens"].numpy(), batch.cu_seqlens)
        assert tuple(tensors["tokens"].shape) == (4, 48)
        chosen = batch.to_torch(fields=["cu_seqlens", "cu_seqlens_padded"])
        assert set(chosen) == {"cu_seqlens", "cu_seqlens_padded"}
        differ += not torch.equal(chosen["cu_seqlens"], chosen["cu_seqlens_padded"])
    assert differ > 0  # some episodes are padded, so the two differ


def test_dump_writes_both_cu_seqlens(sft_dir, tmp_path, cli):
    keys = packed_keys(sft_dir, 2, context_parallel_split=True, rank=1)
    xml = write_config(tmp_path / "c.xml", **keys)
    run_cli(cli, "dump", "--config", xml, "--batches", 5, "--out", tmp_path / "dump")
    got = batches(keys, 5)
    for name in ("cu_seqlens", "cu_seqlens_padded"):
        np.testing.assert_array_equal(np.load(tmp_path / "dump" / f"{name}.npy"),
                                      np.concatenate([b[name] for b in got]))
    np.testing.assert_array_equal(np.load(tmp_path / "dump" / "x.npy"), np.concatenate([b["tokens"] for b in got]))
