"""DatasetWriter: all or nothing (a split appears in split_dir only when finish() succeeds,
and what a killed writer leaves is removed by the next one), never written over another
split, and safe to share between threads; write_dataset_metadata through the library's one
metadata writer."""
import gc
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import tokenfeed


def episodes(n, length=20, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 250, length) for _ in range(n)]


def writer(split_dir, **kw):
    return tokenfeed.DatasetWriter(split_dir, token_dtype="uint16", write_mask=False, **kw)


def write(split_dir, eps, **kw):
    with writer(split_dir, **kw) as w:
        for e in eps:
            w.add(e)
    return w


def num_episodes(root):
    """What a loader reads from root/train."""
    tokenfeed.write_dataset_metadata(root, token_dtype="uint16", mask_dtype=None, eot_token_id=0)
    return tokenfeed.Loader(dict(dataset_dir=str(root), batch_size=1, block_size=8, audit_log_dir="")).num_episodes()


def hidden(parent):
    """The writer's temporary directories (.NAME.tmp-*, .NAME.replaced-*) left in parent."""
    return sorted(p.name for p in Path(parent).iterdir() if p.name.startswith("."))


def read_split(split_dir, dtype=np.uint32):
    """Every episode of a split, in order, as arrays."""
    out = []
    for shard in sorted(Path(split_dir).iterdir()):
        tokens = np.fromfile(shard / "tokens.bin", dtype=dtype)
        index = np.fromfile(shard / "episodes.idx", dtype=np.uint64).reshape(-1, 2)
        out += [tokens[start:start + n] for start, n in index]
    return out


def test_refuses_to_write_over_another_split(tmp_path):
    # The audit's case: 50 episodes in 10 shards, then 5 more written into the same
    # directory used to replace shard_00000 only, and the loader read old and new together.
    train = tmp_path / "train"
    write(train, episodes(50), shard_tokens=100)  # 5 episodes of 20 tokens per shard
    assert len(list(train.iterdir())) == 10 and num_episodes(tmp_path) == 50
    with pytest.raises(tokenfeed.IoError, match="is not empty") as e:
        writer(train, shard_tokens=100)
    assert "overwrite" in str(e.value) and isinstance(e.value, OSError)
    assert num_episodes(tmp_path) == 50 and hidden(tmp_path) == []

    # overwrite=True replaces it, and only once the new split is complete.
    w = writer(train, shard_tokens=100, overwrite=True)
    new = episodes(5, seed=1)
    for e in new:
        w.add(e)
    assert num_episodes(tmp_path) == 50  # the old split, untouched so far
    assert w.finish() == {"episodes": 5, "tokens": 100, "masked_tokens": 0, "shards": 1}
    assert num_episodes(tmp_path) == 5
    assert [p.name for p in train.iterdir()] == ["shard_00000"] and hidden(tmp_path) == []
    for got, expected in zip(read_split(train, np.uint16), new):
        np.testing.assert_array_equal(got, expected)

    # An existing empty directory is fine; a file in the way is not.
    (tmp_path / "val").mkdir()
    write(tmp_path / "val", episodes(3))
    assert len(read_split(tmp_path / "val", np.uint16)) == 3
    (tmp_path / "file").write_text("x")
    with pytest.raises(tokenfeed.IoError, match="not a directory"):
        writer(tmp_path / "file", overwrite=True)


def test_nothing_is_left_unless_finish_succeeds(tmp_path):
    train = tmp_path / "train"
    # An exception in the with block: what was written is removed, not finished.
    with pytest.raises(RuntimeError, match="tokenizer crashed"):
        with writer(train, shard_tokens=100) as w:
            for i, e in enumerate(episodes(30)):
                w.add(e)
                if i == 20:
                    raise RuntimeError("tokenizer crashed")
    assert not train.exists() and hidden(tmp_path) == [] and not w.finished
    with pytest.raises(tokenfeed.UsageError, match="discarded"):
        w.add([1, 2])
    with pytest.raises(tokenfeed.UsageError, match="discarded"):
        w.finish()

    # The same over an existing split with overwrite=True: the old split stays as it was.
    write(train, episodes(50), shard_tokens=100)
    with pytest.raises(KeyboardInterrupt):
        with writer(train, overwrite=True) as w:
            w.add(episodes(1)[0])
            raise KeyboardInterrupt
    assert num_episodes(tmp_path) == 50 and hidden(tmp_path) == []

    # A writer dropped without finish(), and discard().
    w = writer(tmp_path / "val")
    w.add(episodes(1)[0])
    assert len(hidden(tmp_path)) == 1 and hidden(tmp_path)[0].startswith(".val.tmp-")  # written there
    del w
    gc.collect()
    assert not (tmp_path / "val").exists() and hidden(tmp_path) == []
    w = writer(tmp_path / "val")
    w.add(episodes(1)[0])
    w.discard()
    w.discard()  # idempotent
    assert not (tmp_path / "val").exists() and hidden(tmp_path) == []

    # finish() in the block, then an exception: the split was complete and stays.
    with pytest.raises(RuntimeError):
        with writer(tmp_path / "val") as w:
            w.add(episodes(1)[0])
            w.finish()
            raise RuntimeError("after finishing")
    assert len(read_split(tmp_path / "val", np.uint16)) == 1
    w.discard()  # nothing to discard after finish()
    assert len(read_split(tmp_path / "val", np.uint16)) == 1


def test_finish_refuses_a_split_dir_filled_meanwhile(tmp_path):
    train = tmp_path / "train"
    w = writer(train)
    w.add(episodes(1)[0])
    train.mkdir()
    (train / "stray.txt").write_text("someone else's file")
    with pytest.raises(tokenfeed.IoError, match="is not empty"):
        w.finish()
    assert [p.name for p in train.iterdir()] == ["stray.txt"] and hidden(tmp_path) == []
    with pytest.raises(tokenfeed.UsageError, match="discarded"):
        w.add([1])


def test_threads_share_a_writer(tmp_path):
    # Every add runs GIL-free under the writer's lock: the episodes of 4 threads all land,
    # each exactly once and whole (unsynchronized writes would interleave or lose some).
    w = tokenfeed.DatasetWriter(tmp_path / "train", token_dtype="uint32", shard_tokens=5000)
    per_thread = 300

    def work(k):
        for i in range(per_thread):
            length = 5 + i % 13
            w.add(np.full(length, k * 100_000 + i, dtype=np.uint32), np.ones(length, dtype=np.uint8))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    summary = w.finish()
    assert summary["episodes"] == 4 * per_thread and summary["shards"] > 1
    got = read_split(tmp_path / "train")
    assert all((e == e[0]).all() and len(e) == 5 + (int(e[0]) % 100_000) % 13 for e in got)
    assert sorted(int(e[0]) for e in got) == sorted(k * 100_000 + i for k in range(4) for i in range(per_thread))


def test_finish_while_other_threads_add(tmp_path):
    # finish() waits for the add in progress and frees the C++ writer only then; later adds
    # raise UsageError. The split holds exactly the adds that returned.
    w = tokenfeed.DatasetWriter(tmp_path / "train", token_dtype="uint32", write_mask=False, shard_tokens=2000)
    added, errors = [], []
    go = threading.Event()

    def work(k):
        go.wait()
        for i in range(10_000_000):
            value = k * 10_000_000 + i
            try:
                w.add(np.full(9, value, dtype=np.uint32))
            except tokenfeed.UsageError as e:
                errors.append(str(e))
                return
            added.append(value)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    go.set()
    time.sleep(0.05)
    summary = w.finish()
    for t in threads:
        t.join()
    assert len(errors) == 3 and all("after finish" in e for e in errors), errors
    got = read_split(tmp_path / "train")
    assert summary["episodes"] == len(got) == len(added) > 0
    assert sorted(int(e[0]) for e in got) == sorted(added)


KILLED_WRITER = """
import sys
import numpy as np
import tokenfeed
w = tokenfeed.DatasetWriter(sys.argv[1], token_dtype="uint16", write_mask=False, shard_tokens=200)
rng = np.random.default_rng(0)
print("writing", flush=True)
while True:  # never finished: killed while it adds episodes
    w.add(rng.integers(0, 250, 20))
"""


def test_a_writer_killed_mid_write_leaves_no_split_and_the_next_one_cleans_up(tmp_path):
    train = tmp_path / "train"
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(train)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "writing\n"
        time.sleep(0.2)  # some shards written
    finally:
        child.kill()
        child.wait(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert not train.exists()
    left = hidden(tmp_path)
    assert len(left) == 1 and left[0].startswith(f".train.tmp-{child.pid}-")
    assert (tmp_path / left[0] / "shard_00000").is_dir()

    # What it left is never read as a dataset, nor is its staging directory itself.
    tokenfeed.write_dataset_metadata(tmp_path, token_dtype="uint16", mask_dtype=None, eot_token_id=0)
    keys = dict(dataset_dir=str(tmp_path), batch_size=1, block_size=8, audit_log_dir="")
    with pytest.raises(tokenfeed.IoError, match=f"has no train split, only '{left[0]}', the staging directory"):
        tokenfeed.Loader(keys)
    with pytest.raises(tokenfeed.IoError, match="is not a dataset: it is the staging directory of an unfinished"):
        tokenfeed.Loader(dict(keys, dataset_dir=str(tmp_path / left[0])))

    # The rerun succeeds and removes the dead writer's staging directory.
    write(train, episodes(12), shard_tokens=100)
    assert hidden(tmp_path) == [] and num_episodes(tmp_path) == 12


def test_write_dataset_metadata_writes_what_json_dump_wrote(tmp_path):
    """The library's one metadata writer writes the bytes the package's json.dump wrote before
    (field order, indent 2, ASCII escapes, a final newline), and the loader reads them back."""
    special = tokenfeed.SpecialTokenIds(system=1, user=2, assistant=3, eot=4, tool=5)
    path = tokenfeed.write_dataset_metadata(tmp_path, token_dtype="uint16", mask_dtype="uint8", eot_token_id=4,
                                            eos_token_id=4, pad_token_id=0, vocab_size=300, special_tokens=special,
                                            note="déjà vu ✓", ratio=0.1, nested={"a": [1, 2.5, None, True]},
                                            empty={}, token_dtype_twice="x")
    expected = {"format_version": 1, "token_dtype": "uint16", "mask_dtype": "uint8", "vocab_size": 300,
                "eot_token_id": 4, "eos_token_id": 4, "pad_token_id": 0,
                "special_tokens": {"system": 1, "user": 2, "assistant": 3, "eot": 4, "tool": 5},
                "note": "déjà vu ✓", "ratio": 0.1, "nested": {"a": [1, 2.5, None, True]}, "empty": {},
                "token_dtype_twice": "x"}
    assert path == str(tmp_path / "dataset_metadata.json")
    assert Path(path).read_text(encoding="utf-8") == json.dumps(expected, indent=2) + "\n"
    assert tokenfeed.special_token_ids_from_metadata(tmp_path).tool == 5


def test_write_dataset_metadata_refuses_what_the_loader_would_refuse(tmp_path):
    tokenfeed.write_dataset_metadata(tmp_path, token_dtype="uint16")
    before = (tmp_path / "dataset_metadata.json").read_bytes()
    with pytest.raises(tokenfeed.FormatError, match="lacks 'eot'"):
        tokenfeed.write_dataset_metadata(tmp_path, token_dtype="uint16",
                                         special_tokens={"system": 1, "user": 2, "assistant": 3})
    with pytest.raises(tokenfeed.ConfigError, match="token_dtype must be 'uint16' or 'uint32', not 'int8'"):
        tokenfeed.write_dataset_metadata(tmp_path, token_dtype="int8")
    with pytest.raises(tokenfeed.FormatError, match="vocab_size"):
        tokenfeed.write_dataset_metadata(tmp_path, token_dtype="uint16", vocab_size=-1)
    assert (tmp_path / "dataset_metadata.json").read_bytes() == before
    assert hidden(tmp_path) == []
