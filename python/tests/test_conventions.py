"""What a PyTorch user expects of a data loader: one epoch as an iterable with a length,
iter(loader), Ctrl-C while waiting for a batch, per-split epoch settings, the dataset's
vocabulary on the loader, a configurable held-batch limit, and quiet logs."""
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tokenfeed
from conftest import REPO, SPECIAL, VOCAB, base_keys, special_ids, write_config


def test_epoch_is_one_epoch_with_a_length(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    epoch = loader.epoch("train")
    assert len(epoch) == loader.batches_per_epoch() == 75
    batches = [b.epoch for b in epoch]
    assert batches == [0] * 75 and len(epoch) == 0
    # The next call is the next epoch; one started by get_batch is finished, not restarted.
    loader.get_batch()
    rest = loader.epoch("train")
    assert len(rest) == 74 and [b.epoch for b in rest] == [1] * 74
    assert len(loader.epoch("val")) == 10
    random = tokenfeed.Loader(base_keys(sft_dir, batch_sampling_mode="random"))
    with pytest.raises(tokenfeed.UsageError, match="random has no epochs"):
        random.epoch("train")


def test_iter_of_the_loader_is_train_for_ever(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    it = iter(loader)
    got = [(b.split, b.epoch) for b in (next(it) for _ in range(80))]  # past the end of epoch 0
    assert {split for split, _ in got} == {"train"} and got[-1][1] == 1
    with pytest.raises(TypeError):
        len(it)


def test_per_split_epoch_settings_from_a_dict_and_xml(sft_dir, tmp_path):
    keys = base_keys(sft_dir, **{"val.epoch_shuffle": False, "val.epoch_drop_last": False}, batch_size=3)
    loader = tokenfeed.Loader(keys)
    assert loader.config["val.epoch_shuffle"] == "false"
    ids = np.concatenate([b.episode_ids.copy() for b in loader.epoch("val")])
    assert ids.tolist() == list(range(40)) + [-1, -1]  # in order, the remainder kept (fill rows)
    train = np.concatenate([b.episode_ids.copy() for b in loader.epoch("train")])
    assert not (np.diff(train) > 0).all()  # train still shuffles
    assert tokenfeed.Loader(base_keys(sft_dir, batch_size=3)).fingerprint != loader.fingerprint
    xml = tmp_path / "c.xml"
    xml.write_text(f"<training><dataset_dir>{sft_dir}</dataset_dir><batch_size>3</batch_size>"
                   "<block_size>64</block_size><audit_log_dir></audit_log_dir>"
                   "<val><epoch_shuffle>false</epoch_shuffle><epoch_drop_last>false</epoch_drop_last></val>"
                   "</training>")
    assert tokenfeed.Loader(str(xml)).fingerprint == loader.fingerprint


def test_the_loader_exposes_the_vocabulary(sft_dir, stream_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    assert loader.vocab_size == VOCAB
    assert loader.eot_token_id == SPECIAL["eot"] and loader.pad_token_id == SPECIAL["eot"]
    s = loader.special_token_ids
    assert (s.system, s.user, s.assistant, s.tool, s.eot) == tuple(SPECIAL[k] for k in
                                                                  ("system", "user", "assistant", "tool", "eot"))
    assert tokenfeed.Loader(base_keys(sft_dir, pad_token_id=7)).pad_token_id == 7
    stream = tokenfeed.Loader(base_keys(stream_dir))
    assert stream.vocab_size is None and stream.special_token_ids is None and stream.eot_token_id == 0


def test_the_loader_reports_the_ids_it_settled(sft_dir, tmp_path):
    """A dataset recording both eot and eos: padding takes eot (pad_token_id's rule), a
    document ends at eos (document_aware's rule), and Python reports the loader's own ids
    rather than a rule of its own (eot_token_id once said eot-else-eos)."""
    data = tmp_path / "both"
    shutil.copytree(sft_dir, data)
    meta = json.loads((data / "dataset_metadata.json").read_text())
    meta["eos_token_id"] = eos = VOCAB - 1
    (data / "dataset_metadata.json").write_text(json.dumps(meta))
    loader = tokenfeed.Loader(base_keys(data))
    assert loader.token_ids == {"pad": SPECIAL["eot"], "end_of_text": eos, "eot": SPECIAL["eot"], "eos": eos}
    assert loader.eot_token_id == eos and loader.pad_token_id == SPECIAL["eot"]


def test_max_held_batches_allows_longer_gradient_accumulation(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir, max_held_batches=8))
    held = [loader.get_batch() for _ in range(8)]
    with pytest.raises(tokenfeed.UsageError, match="already holds 8"):
        loader.get_batch()
    del held[0]
    assert loader.get_batch().x.shape == (4, 64)
    with pytest.raises(tokenfeed.UsageError, match="already holds 4"):
        default = tokenfeed.Loader(base_keys(sft_dir))
        kept = [default.get_batch() for _ in range(tokenfeed.MAX_HELD_BATCHES + 1)]  # noqa: F841


def test_logs_one_line_at_open_and_epochs_at_debug(sft_dir):
    script = textwrap.dedent(f"""
        import tokenfeed
        keys = dict(dataset_dir={str(sft_dir)!r}, batch_size=4, block_size=64, audit_log_dir="", prefetch_depth=4)
        loader = tokenfeed.Loader(keys)
        for _ in loader.epoch("train"):
            pass
        loader.get_batch()
        tokenfeed.set_logging(True, level="debug")
        loader.get_batch("val")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 2, lines  # the open line; then with level=debug, val's epoch 0
    assert lines[0].startswith("[tokenfeed] opened '") and "mask=true" in lines[0] and "audit_log=off" in lines[0]
    assert "split=val epoch=0" in lines[1]
    with pytest.raises(tokenfeed.UsageError, match="level must be"):
        tokenfeed.set_logging(True, level="loud")


# A get_batch that waits seconds for its batch: one episode of 40 M tokens whose only user
# turn comes first, so that drop_oldest_turns scans the whole episode for every row (it looks
# for a later user turn to cut at), 64 rows a batch (at least 0.7 s on an idle 2-core
# machine), on one decode thread.
CTRL_C_SCRIPT = """
import json, os, signal, sys, threading, time
import numpy as np
import tokenfeed

root = sys.argv[1]
S = dict(system=256, user=257, assistant=258, tool=259, eot=260)
if not os.path.exists(os.path.join(root, "train")):
    episode = np.full(40_000_000, 5, dtype=np.uint32)
    episode[0], episode[-4:] = S["user"], [S["eot"], S["assistant"], 6, S["eot"]]
    with tokenfeed.DatasetWriter(os.path.join(root, "train"), token_dtype="uint16", write_mask=False) as w:
        w.add(episode)
    tokenfeed.write_dataset_metadata(root, token_dtype="uint16", mask_dtype=None, vocab_size=261,
                                     eot_token_id=S["eot"], special_tokens=S)
loader = tokenfeed.Loader(dict(dataset_dir=root, batch_size=64, block_size=16, truncation="drop_oldest_turns",
                               batch_sampling_mode="random", prefetch_depth=1, decode_threads=1,
                               audit_log_dir=""))
start = time.perf_counter()
loader.get_batch()
one_batch = time.perf_counter() - start
loader.get_batch()  # the batch prefetched meanwhile, if any; the next call waits a whole batch
sent = []
def interrupt():
    sent.append(time.perf_counter())
    os.kill(os.getpid(), signal.SIGINT)
threading.Timer(0.2, interrupt).start()
try:
    loader.get_batch()
    raised = None
except KeyboardInterrupt:
    raised = time.perf_counter()
usable = loader.get_batch().x.shape == (64, 16)
print(json.dumps(dict(one_batch=one_batch, latency=None if raised is None else raised - sent[0], usable=usable)))
"""


def test_ctrl_c_interrupts_a_waiting_get_batch(tmp_path):
    result = subprocess.run([sys.executable, "-c", CTRL_C_SCRIPT, str(tmp_path)], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    r = json.loads(result.stdout.splitlines()[-1])
    # The wait must be long enough for the check to mean something.
    assert r["one_batch"] > 0.6, r
    assert r["latency"] is not None, r
    assert r["latency"] < 0.3, r  # 50 ms slices; the machine may be busy
    assert r["usable"], r
