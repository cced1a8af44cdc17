"""The preparation side: the chat template functions and DatasetWriter, checked against the
sample dataset `tokenfeed prepare` made and against the files the writer produces."""
import json

import numpy as np
import pytest

import tokenfeed
from conftest import REPO, SPECIAL, base_keys, run_cli, special_ids

SAMPLE = REPO / "data" / "sample"


def test_template_by_hand():
    s = special_ids()
    ids = tokenfeed.serialize_chat([("user", [10, 11]), {"role": "assistant", "ids": [12, 13, 14]}], s,
                                   default_system_ids=[1, 2])
    S, U, A, E = SPECIAL["system"], SPECIAL["user"], SPECIAL["assistant"], SPECIAL["eot"]
    expected = [S, 1, 2, E, U, 10, 11, E, A, 12, 13, 14, E]
    assert ids.dtype == np.uint32 and ids.tolist() == expected
    mask = tokenfeed.sft_loss_mask_for_ids(ids, s)
    assert mask.dtype == np.uint8
    assert mask.tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1]

    packed_ids, packed_mask = tokenfeed.pack_sft_ids_and_mask(ids, mask, 16, s, pad_id=E)
    assert packed_ids.tolist() == expected + [E] * 3 and packed_mask.tolist() == mask.tolist() + [0] * 3
    x, y, loss = tokenfeed.collate_sft_batch([(packed_ids, packed_mask)] * 2, T=15)
    assert x.shape == y.shape == loss.shape == (2, 15)
    assert x[0].tolist() == packed_ids[:-1].tolist()
    assert y[0].tolist() == [i if m else -100 for i, m in zip(packed_ids[1:], packed_mask[1:])]
    assert loss[1].tolist() == packed_mask[1:].tolist()

    # An unusable conversation is a ValueError (ConversationError), not the OSError that
    # FormatError is for files.
    with pytest.raises(tokenfeed.ConversationError, match="no_assistant|assistant") as e:
        tokenfeed.serialize_chat([("user", [1])], s)
    assert isinstance(e.value, ValueError) and isinstance(e.value, tokenfeed.Error)
    assert not isinstance(e.value, OSError) and e.value.kind == "format"
    with pytest.raises(tokenfeed.ConversationError):
        tokenfeed.serialize_chat([("user", [1]), ("assistant", [U])], s)  # a special id in content
    with pytest.raises(tokenfeed.ConversationError):
        tokenfeed.serialize_chat([("user", [1]), ("assistant", [300])], s, vocab_size=261)
    with pytest.raises(tokenfeed.ConversationError):
        tokenfeed.serialize_chat_text([("user", "hi")], tokenfeed.make_tokenizer("bytes"))  # no assistant turn
    with pytest.raises(tokenfeed.ConfigError):
        tokenfeed.SpecialTokenIds(system=1, user=1, assistant=2, eot=3)


def test_serialize_chat_text_refuses_what_prepare_refuses():
    # None, numbers and non-text parts used to become their str() and be trained on.
    tokenizer = tokenfeed.make_tokenizer("bytes")
    user = {"role": "user", "content": "hi"}
    bad = [
        ([user, {"role": "assistant", "content": None}], r'message 2 "content" is null'),
        ([user, {"role": "assistant", "content": 5}], r'message 2 "content" is an integer'),
        ([user, {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}],
         r'message 2 content part 1 has type "image_url"'),
        ([user, ("assistant", b"bytes")], r"message 2 holds a value that is not JSON"),
        ([user, {"role": "assistant"}], r'message 2 has no "content"'),
    ]
    for messages, detail in bad:
        with pytest.raises(tokenfeed.ConversationError, match=detail):
            tokenfeed.serialize_chat_text(messages, tokenizer)
    # Text parts are joined, as prepare joins them.
    parts = [user, {"role": "assistant", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]}]
    ids, mask = tokenfeed.serialize_chat_text(parts, tokenizer, with_mask=True)
    assert ids.tolist() == tokenfeed.serialize_chat_text([user, ("assistant", "Hello")], tokenizer).tolist()
    assert mask.tolist() == tokenfeed.sft_loss_mask_for_ids(ids, tokenizer.special_ids).tolist()


def test_turn_aware_truncation_keeps_the_final_assistant_turn():
    s = special_ids()
    conversation = [("user", [1] * 20), ("assistant", [2] * 20), ("user", [3] * 5), ("assistant", [4] * 5)]
    ids = tokenfeed.serialize_chat(conversation, s, default_system_ids=[9])
    mask = tokenfeed.sft_loss_mask_for_ids(ids, s)
    S = 24
    head_begin, head_end, tail_begin, tail_end = tokenfeed.plan_sft_window(ids, S, s)
    kept = np.concatenate([ids[head_begin:head_end], ids[tail_begin:tail_end]])
    assert len(kept) <= S and kept[-1] == SPECIAL["eot"] and (kept == 4).sum() == 5
    packed, packed_mask = tokenfeed.pack_sft_ids_and_mask(ids, mask, S, s, pad_id=SPECIAL["eot"])
    assert packed[:len(kept)].tolist() == kept.tolist()


def test_sample_dataset_is_the_template_of_its_conversations():
    # Every episode `tokenfeed prepare` wrote into data/sample/sft is the byte tokenizer's
    # template of one conversation in conversations.jsonl, with the template's mask.
    tokenizer = tokenfeed.make_tokenizer("bytes")
    s = tokenizer.special_ids
    assert (s.system, s.user, s.assistant, s.tool, s.eot) == (256, 257, 258, 259, 260)
    assert tokenfeed.special_token_ids_from_metadata(SAMPLE / "sft").eot == 260
    made = {}
    for line in (SAMPLE / "conversations.jsonl").read_text().splitlines():
        ids = tokenfeed.serialize_chat_text(json.loads(line)["messages"], tokenizer)
        made[ids.tobytes()] = tokenfeed.sft_loss_mask_for_ids(ids, s)
    shard = SAMPLE / "sft" / "train" / "shard_00000"
    tokens = np.fromfile(shard / "tokens.bin", dtype=np.uint16)
    mask = np.fromfile(shard / "mask.bin", dtype=np.uint8)
    index = np.fromfile(shard / "episodes.idx", dtype=np.uint64).reshape(-1, 2)
    assert len(index) == 358
    for start, n in index:
        episode = tokens[start:start + n].astype(np.uint32)
        assert episode.tobytes() in made
        np.testing.assert_array_equal(mask[start:start + n], made[episode.tobytes()])
    assert tokenizer.decode(tokenizer.encode("héllo")) == "héllo"


def test_writer_files(sft_written):
    root, written = sft_written
    shard = root / "train"  # shard_tokens=0: the three files directly in... one shard directory
    shard_dirs = sorted(p for p in shard.iterdir() if p.is_dir())
    assert [p.name for p in shard_dirs] == ["shard_00000"]
    tokens = np.fromfile(shard_dirs[0] / "tokens.bin", dtype=np.uint32)
    mask = np.fromfile(shard_dirs[0] / "mask.bin", dtype=np.uint8)
    index = np.fromfile(shard_dirs[0] / "episodes.idx", dtype=np.uint64).reshape(-1, 2)
    assert len(index) == len(written["train"])
    for (start, n), (ids, m) in zip(index, written["train"]):
        np.testing.assert_array_equal(tokens[start:start + n], ids)
        np.testing.assert_array_equal(mask[start:start + n], m)
    meta = json.loads((root / "dataset_metadata.json").read_text())
    assert meta["token_dtype"] == "uint32" and meta["special_tokens"]["assistant"] == SPECIAL["assistant"]


def test_written_dataset_loads_as_written(sft_written):
    # Unshuffled, each row is its episode cut or padded to the block (the batch rule).
    root, written = sft_written
    T = 96
    loader = tokenfeed.Loader(base_keys(root, block_size=T, use_loss_mask=True, epoch_shuffle=False,
                                        batch_size=5))
    assert loader.num_episodes() == len(written["train"])
    assert loader.batches_per_epoch() == len(written["train"]) // 5
    assert loader.splits == ["train"]
    for step, batch in enumerate(loader.iter("train", steps=6)):
        for r in range(5):
            ids, m = written["train"][step * 5 + r]
            t = np.full(T + 1, SPECIAL["eot"], dtype=np.int64)
            t[:min(len(ids), T + 1)] = ids[:T + 1]
            mm = np.zeros(T + 1, dtype=np.float32)
            mm[:min(len(ids), T + 1)] = m[:T + 1]
            np.testing.assert_array_equal(batch.x[r], t[:T])
            np.testing.assert_array_equal(batch.y[r], t[1:])
            np.testing.assert_array_equal(batch.mask[r], mm[1:])
            assert batch.episode_ids[r] == step * 5 + r


def test_shards_and_add_many(tmp_path):
    rng = np.random.default_rng(3)
    lengths = rng.integers(2, 50, 200)
    tokens = rng.integers(0, 2**20, lengths.sum())
    mask = rng.random(lengths.sum()) < 0.5
    with tokenfeed.DatasetWriter(tmp_path / "train", token_dtype="uint32", shard_tokens=1000) as w:
        w.add_many(tokens[: lengths[:100].sum()], lengths[:100], mask[: lengths[:100].sum()])
        for n, start in zip(lengths[100:], np.cumsum(lengths)[99:-1]):
            w.add(tokens[start:start + n], mask[start:start + n])
    summary = w.finish()  # idempotent after the context manager finished it
    assert summary["episodes"] == 200 and summary["tokens"] == lengths.sum()
    assert summary["masked_tokens"] == mask.sum() and summary["shards"] > 1
    shards = sorted((tmp_path / "train").iterdir())
    assert len(shards) == summary["shards"]
    got = np.concatenate([np.fromfile(s / "tokens.bin", dtype=np.uint32) for s in shards])
    np.testing.assert_array_equal(got, tokens)
    assert all((s / "tokens.bin").stat().st_size <= 4000 for s in shards)


OPENAI_CHATS = [
    [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "a"},
     {"role": "assistant", "content": "bad", "weight": 0}, {"role": "user", "content": "b"},
     {"role": "assistant", "content": [{"type": "text", "text": "go"}, {"type": "text", "text": "od"}]}],
    [{"role": "user", "content": "Weather?"},
     {"role": "assistant", "content": None, "tool_calls": [
         {"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": '{"q": 1, "city": "Paris"}'}}]},
     {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
     {"role": "assistant", "content": "Sunny."}],
]


def test_openai_messages_in_full_match_prepare(tmp_path, cli):
    # weight 0, the developer role, text parts, tool_calls and default_system_text="" give
    # the same ids and mask from Python as from `tokenfeed prepare`.
    tokenizer = tokenfeed.make_tokenizer("bytes")
    s = tokenizer.special_ids
    made = [tokenfeed.serialize_chat_text(m, tokenizer, default_system_text="", with_mask=True) for m in OPENAI_CHATS]
    ids, mask = made[0]
    assert ids[0] == s.system and (ids == s.assistant).sum() == 2  # developer = system; the weight-0 turn stays
    trained = ids[mask.astype(bool)]
    assert tokenizer.decode(trained[:-1]) == "good" and trained[-1] == s.eot
    ids, mask = made[1]
    assert ids[0] == s.user  # no system turn with default_system_text=""
    call = '{"name": "get_weather", "arguments": {"city":"Paris","q":1}}'
    assert tokenizer.decode(ids[mask.astype(bool)]) == tokenizer.decode(
        np.concatenate([np.frombuffer(call.encode(), np.uint8).astype(np.uint32), [s.eot],
                        np.frombuffer(b"Sunny.", np.uint8).astype(np.uint32), [s.eot]]))

    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"messages": m}) + "\n" for m in OPENAI_CHATS))
    run_cli(cli, "prepare", "--input", tmp_path / "in.jsonl", "--output-dir", tmp_path / "ds", "--val-split", "0",
            "--system-text", "")
    shard = tmp_path / "ds" / "train" / "shard_00000"
    tokens = np.fromfile(shard / "tokens.bin", dtype=np.uint16)
    masks = np.fromfile(shard / "mask.bin", dtype=np.uint8)
    index = np.fromfile(shard / "episodes.idx", dtype=np.uint64).reshape(-1, 2)
    written = sorted((tokens[a:a + n].astype(np.uint32).tolist(), masks[a:a + n].tolist()) for a, n in index)
    assert written == sorted((i.tolist(), m.tolist()) for i, m in made)


def test_serialize_chat_honours_weight_zero():
    s = special_ids()
    ids, mask = tokenfeed.serialize_chat([{"role": "user", "ids": [1]}, {"role": "assistant", "ids": [2], "weight": 0},
                                          {"role": "user", "ids": [3]}, {"role": "assistant", "ids": [4]}],
                                         s, with_mask=True)
    assert ids[mask.astype(bool)].tolist() == [4, SPECIAL["eot"]]
    with pytest.raises(tokenfeed.ConversationError, match='message 2 "weight"'):
        tokenfeed.serialize_chat([("user", [1]), {"role": "assistant", "ids": [2], "weight": 0.5}], s)
