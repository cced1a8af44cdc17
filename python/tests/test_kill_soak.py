"""Kill -9 soak with exact resume: a consumer that checkpoints its loader every few steps
(kill_soak_child.py) is killed with SIGKILL at random instants, including while it writes
its state, and restarted from its last state until it has consumed every step; the
batches it consumed, counted by step, must equal an uninterrupted run's: none missing,
none repeated. Every mode, both sampling modes, across epoch boundaries, world_size 2.
The audit logs the killed processes left stay parseable (tokenfeed.read_audit_log)."""
import json
import os
import random
import signal
import subprocess
import sys
import time
import zlib

import numpy as np
import pytest

import tokenfeed
from conftest import base_keys

CHILD = os.path.join(os.path.dirname(__file__), "kill_soak_child.py")


def crc(batch):
    return zlib.crc32(np.ascontiguousarray(batch.y).tobytes(), zlib.crc32(np.ascontiguousarray(batch.x).tobytes()))


CASES = [
    ("sft_episode-epoch", "sft", {"dataset_mode": "sft_episode", "batch_sampling_mode": "epoch"}, 180),
    ("sft_episode-random", "sft", {"dataset_mode": "sft_episode", "batch_sampling_mode": "random"}, 120),
    ("sft_packed-epoch", "sft", {"dataset_mode": "sft_packed", "batch_sampling_mode": "epoch"}, 120),
    ("token_stream-random", "stream", {"dataset_mode": "token_stream", "batch_sampling_mode": "random"}, 120),
    ("token_stream-epoch", "stream", {"dataset_mode": "token_stream", "batch_sampling_mode": "epoch",
                                      "batch_size": 64}, 120),
    ("sft_episode-world2", "sft", {"dataset_mode": "sft_episode", "world_size": 2, "rank": 1}, 120),
    # Episodes (epoch) and a random document-aware stream in one batch, across a stage.
    ("mixture-world2", "mix", {"world_size": 2, "rank": 1}, 120),
]


def soak_keys(data, extra, sft_dir, stream_dir):
    if data != "mix":
        return base_keys(sft_dir if data == "sft" else stream_dir, **extra)
    keys = base_keys("", **extra)
    del keys["dataset_dir"]
    keys["mixture"] = [dict(name="chat", dataset_dir=str(sft_dir), weight=3, batch_sampling_mode="epoch"),
                       dict(name="web", dataset_dir=str(stream_dir), weight=1, dataset_mode="token_stream",
                            batch_sampling_mode="random", document_aware=True)]
    keys["stages"] = [dict(until_step=40), dict(weights={"chat": 1, "web": 2})]
    return keys


@pytest.fixture
def time_limit():
    """Fails the test (TimeoutError) when it runs past 600 s, a hang included: the loader's
    iteration waits in short slices, so the alarm's handler runs."""
    def expired(signum, frame):
        raise TimeoutError("the kill soak took more than 600 s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(600)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("name,data,extra,total", CASES, ids=[c[0] for c in CASES])
def test_kill_soak_resumes_exactly(name, data, extra, total, sft_dir, stream_dir, tmp_path, time_limit):
    keys = soak_keys(data, extra, sft_dir, stream_dir)
    reference = tokenfeed.Loader(keys)
    expected = [(b.step, crc(b)) for b in reference.iter("train", steps=total)]
    if "epoch" in name and reference.batches_per_epoch():
        assert total > reference.batches_per_epoch(), "the run must cross an epoch boundary"
    reference.close()

    keys["audit_log_dir"] = str(tmp_path / "audit")  # one log per process, killed mid-run
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    rng = random.Random(name)
    records = tmp_path / "records.txt"

    def consumed():
        try:
            return records.read_bytes().count(b"\n")
        except FileNotFoundError:
            return 0

    kills = 0
    for _ in range(40):
        before = consumed()
        child = subprocess.Popen([sys.executable, CHILD, str(tmp_path), str(total), "7", "0.003"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if kills < 8:
            # Kill once the child has gone 1..30 steps past where the last one stopped (its
            # checkpoints are every 7), at a random instant within a few milliseconds, so
            # that some kills land while it writes its state; however loaded the machine.
            target = before + rng.randint(1, 30)
            deadline = time.monotonic() + 120
            while child.poll() is None and consumed() < target and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(rng.uniform(0, 0.004))
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
                kills += 1
        out, err = child.communicate(timeout=300)
        if child.returncode == 0:
            break
        assert child.returncode == -signal.SIGKILL, err.decode()
    else:
        pytest.fail("the consumer never finished")
    assert kills >= 5, f"only {kills} kills landed: the soak proved little"
    lines = (tmp_path / "records.txt").read_text().splitlines()
    got = [(int(s), int(c)) for s, c in (line.split() for line in lines)]
    assert [s for s, _ in got] == list(range(total)), "a step is missing or repeated"
    assert got == expected
    # Every audit log a killed process left is parseable line by line; a line the kill cut
    # short is reported as torn, not read as an event.
    logs = sorted((tmp_path / "audit").iterdir())
    assert 1 <= len(logs) <= kills + 1  # a process killed before it opened the loader has none
    completed = set()
    for log in logs:
        events, torn = tokenfeed.read_audit_log(log)
        assert events and events[0]["action"] == "dataset_load"
        assert torn is None or not torn.endswith("\n")
        completed |= {e.get("source") for e in events if e["action"] == "epoch_complete"}
    if data == "mix":
        assert "chat" in completed, "the mixture's epoch source must cross an epoch boundary"
