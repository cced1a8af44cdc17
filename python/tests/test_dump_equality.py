"""The module returns exactly what `tokenfeed dump` writes for the same config, in every
mode, and a resume state moves freely between the two."""
import json

import numpy as np
import pytest

import tokenfeed
from conftest import base_keys, run_cli, write_config

BATCHES = 12
SEGMENT_FIELDS = ("row", "column", "positions", "episode")

MODES = {
    "sft_episode": lambda sft, stream: base_keys(sft, use_loss_mask=True, epoch_drop_last=False),
    "sft_episode_random": lambda sft, stream: base_keys(sft, use_loss_mask=True, batch_sampling_mode="random"),
    "sft_episode_turns": lambda sft, stream: base_keys(sft, use_loss_mask=True, truncation="drop_oldest_turns",
                                                        block_size=48),
    "sft_packed": lambda sft, stream: base_keys(sft, dataset_mode="sft_packed", use_loss_mask=True),
    "sft_packed_split": lambda sft, stream: base_keys(sft, dataset_mode="sft_packed", use_loss_mask=True,
                                                      truncation="split", block_size=48),
    "sft_episode_split": lambda sft, stream: base_keys(sft, use_loss_mask=True, truncation="split", block_size=48),
    "token_stream": lambda sft, stream: base_keys(stream, block_size=128),
    "token_stream_documents": lambda sft, stream: base_keys(stream, block_size=128, document_aware=True,
                                                            batch_sampling_mode="epoch"),
}


def python_batches(config, n, split="train"):
    loader = tokenfeed.Loader(config)
    out = []
    for batch in loader.iter(split, steps=n):
        out.append({k: v.copy() for k, v in batch.arrays().items()} | {"segments": batch.segments.copy()})
    return loader, out


def cat(batches, name):
    return np.concatenate([b[name] for b in batches])


@pytest.mark.parametrize("mode", sorted(MODES))
def test_matches_dump(mode, sft_dir, stream_dir, tmp_path, cli):
    keys = MODES[mode](sft_dir, stream_dir)
    xml = write_config(tmp_path / "c.xml", **keys)
    out = tmp_path / "dump"
    run_cli(cli, "dump", "--config", xml, "--batches", BATCHES, "--out", out)
    dumped = {p.stem: np.load(p) for p in out.glob("*.npy")}

    for config in (xml, keys):  # the XML file and a dict of the same keys
        _, got = python_batches(config, BATCHES)
        assert len(got) == BATCHES
        np.testing.assert_array_equal(cat(got, "x"), dumped["x"])
        np.testing.assert_array_equal(cat(got, "y"), dumped["y"])
        if mode.startswith("sft_packed"):
            np.testing.assert_array_equal(cat(got, "token_weights"), dumped["weights"])
            np.testing.assert_array_equal(cat(got, "position_ids"), dumped["position_ids"])
            # The structured PackedSegment records, as the dump's int64 rows
            # (batch, row, column, positions, episode).
            segments = np.concatenate([np.column_stack([np.full(len(s), i)] + [s[f].astype(np.int64) for f in SEGMENT_FIELDS])
                                       for i, s in enumerate(b["segments"] for b in got)])
            np.testing.assert_array_equal(segments, dumped["segments"])
            continue
        ids = "window_ids" if mode.startswith("token_stream") else "episode_ids"
        np.testing.assert_array_equal(np.stack([b["episode_ids"] for b in got]), dumped[ids])
        if keys.get("use_loss_mask"):
            np.testing.assert_array_equal(cat(got, "mask"), dumped["mask"])
        if keys.get("document_aware"):
            np.testing.assert_array_equal(cat(got, "doc_ids"), dumped["doc_ids"])
            np.testing.assert_array_equal(cat(got, "position_ids"), dumped["position_ids"])


def test_state_moves_between_dump_and_module(sft_dir, tmp_path, cli):
    keys = base_keys(sft_dir, use_loss_mask=True)
    xml = write_config(tmp_path / "c.xml", **keys)
    state = tmp_path / "state.json"
    run_cli(cli, "dump", "--config", xml, "--batches", 7, "--out", tmp_path / "a", "--save-state", state)

    # The command's state restores the module to the same place...
    loader = tokenfeed.Loader(xml)
    loader.load_state_dict(json.loads(state.read_text()))
    run_cli(cli, "dump", "--config", xml, "--batches", 5, "--out", tmp_path / "b", "--load-state", state)
    got = [loader.get_batch().x.copy() for _ in range(5)]
    np.testing.assert_array_equal(np.concatenate(got), np.load(tmp_path / "b" / "x.npy"))

    # ...and the module's state restores the command.
    (tmp_path / "mine.json").write_text(loader.save_state())
    run_cli(cli, "dump", "--config", xml, "--batches", 3, "--out", tmp_path / "c", "--load-state", tmp_path / "mine.json")
    got = [loader.get_batch().x.copy() for _ in range(3)]
    np.testing.assert_array_equal(np.concatenate(got), np.load(tmp_path / "c" / "x.npy"))
