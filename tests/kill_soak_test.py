#!/usr/bin/env python3
"""Kill -9 soak of the C++ API with exact resume: kill_soak_consumer (a trainer-like consumer
that checkpoints its loader every few steps, temporary file + rename) is killed with SIGKILL
at random instants, some right as it writes its checkpoint, and restarted from its last
checkpoint until it has consumed every step; the batches it consumed, counted by step, must
equal an uninterrupted run's: none missing, none repeated. Each case covers a mode
(sft_episode, sft_packed, token_stream, mixtures), a sampling mode (epoch, random) and
epoch boundaries; several run at world_size 2. The audit logs the killed processes left must
read back with the C++ audit reader, a line cut short reported as torn.

Usage: kill_soak_test.py PATH/TO/kill_soak_consumer   (standard library only; run by ctest)"""
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

CONSUMER = sys.argv[1]
failures = []
EVERY = 5            # checkpoint every 5 steps
PAUSE_US = 2000      # the training step
KILLS = 8            # kills per case
RUN_TIMEOUT = 120    # seconds any one child may take


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)
    return condition


def write_episodes(root, episodes=60, shards=2):
    """An episode-indexed dataset (uint16 tokens, uint8 masks) in `shards` shards."""
    rng = random.Random(7)
    per_shard = (episodes + shards - 1) // shards
    for s in range(shards):
        d = os.path.join(root, "train", f"shard_{s:05d}")
        os.makedirs(d)
        tokens, mask, index, offset = bytearray(), bytearray(), bytearray(), 0
        for e in range(s * per_shard, min(episodes, (s + 1) * per_shard)):
            n = rng.randint(3, 40)
            index += struct.pack("<QQ", offset, n)
            tokens += struct.pack(f"<{n}H", *[(e * 37 + p) % 50000 + 1 for p in range(n)])
            mask += bytes(rng.randint(0, 1) for _ in range(n))
            offset += n
        for name, data in (("tokens.bin", tokens), ("mask.bin", mask), ("episodes.idx", index)):
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
    with open(os.path.join(root, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "mask_dtype": "uint8", "eot_token_id": 0, "vocab_size": 50001}, f)


def write_stream(root, tokens=3000):
    """A token stream (train.bin, uint16) with end-of-text tokens (0) between documents."""
    rng = random.Random(11)
    os.makedirs(root)
    with open(os.path.join(root, "train.bin"), "wb") as f:
        f.write(struct.pack(f"<{tokens}H", *[0 if rng.random() < 0.02 else rng.randint(1, 50000) for _ in range(tokens)]))
    with open(os.path.join(root, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eos_token_id": 0}, f)


def config(path, audit_dir, body):
    with open(path, "w") as f:
        f.write(f"<training><audit_log_dir>{audit_dir}</audit_log_dir><prefetch_depth>3</prefetch_depth>"
                f"<decode_threads>1</decode_threads>{body}</training>")
    return path


def records(path):
    try:
        with open(path) as f:
            return [tuple(map(int, line.split())) for line in f.read().splitlines()]
    except FileNotFoundError:
        return []


def consumed(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def consume(cfg, work, total):
    return subprocess.Popen([CONSUMER, "consume", cfg, work, str(total), str(EVERY), str(PAUSE_US)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_audit(path):
    r = subprocess.run([CONSUMER, "read-audit", path], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None, r.stderr
    fields = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    return fields, r.stderr


def check_audit_logs(name, audit_dir, kills, epochs):
    logs = sorted(os.path.join(audit_dir, e) for e in os.listdir(audit_dir))
    # One per process that opened its loader; a process killed before that has none.
    check(1 <= len(logs) <= kills + 1, f"{name}: {len(logs)} audit logs for {kills} kills")
    actions = []
    for log in logs:
        fields, err = read_audit(log)
        if not check(fields is not None, f"{name}: {log} does not read back: {err}"):
            continue
        actions += fields["actions"].split(",")
        check(fields["actions"].startswith("dataset_load"), f"{name}: {log} starts with {fields['actions'][:40]}")
    if epochs:
        check("epoch_complete" in actions, f"{name}: no epoch_complete in the logs: the run crossed no epoch")
    # A kill rarely lands inside one event's write: cut the last log inside its last line, as
    # such a kill would, and forge a line into its middle.
    with open(logs[-1], "rb") as f:
        text = f.read()
    lines = text.splitlines(keepends=True)
    fields, _ = read_audit(logs[-1])
    complete = int(fields["events"]) if fields else 0
    cut = os.path.join(os.path.dirname(audit_dir), "cut.log")
    with open(cut, "wb") as f:
        f.write(text[:len(text) - len(lines[-1]) // 2])
    fields, err = read_audit(cut)
    check(fields is not None and fields["torn"] == "yes" and int(fields["events"]) == complete - 1,
          f"{name}: a line cut short is torn, the others events: {fields} {err}")
    if len(lines) >= 2:
        with open(cut, "wb") as f:
            f.write(lines[0] + b"2026-01-01T00:00:00.000Z | TRAINING | INFO | forged\n" + b"".join(lines[1:]))
        fields, err = read_audit(cut)
        check(fields is None and "line 2 is not an audit event" in err, f"{name}: a forged line 2: {fields} {err}")


def soak(tmp, name, body, total, epochs):
    case = os.path.join(tmp, name)
    os.makedirs(case)
    reference_dir = os.path.join(case, "reference")
    os.makedirs(reference_dir)
    ref = consume(config(os.path.join(case, "reference.xml"), "", body), reference_dir, total)
    out, err = ref.communicate(timeout=RUN_TIMEOUT)
    if not check(ref.returncode == 0, f"{name}: the uninterrupted run failed ({ref.returncode}): {err}"):
        return 0
    expected = records(os.path.join(reference_dir, "records.txt"))
    check([s for s, _ in expected] == list(range(total)), f"{name}: the uninterrupted run's steps")

    work = os.path.join(case, "soak")
    os.makedirs(work)
    audit_dir = os.path.join(case, "audit")
    cfg = config(os.path.join(case, "soak.xml"), audit_dir, body)
    rng = random.Random(name)
    log = os.path.join(work, "records.txt")
    kills = mid_checkpoint = 0
    for _ in range(4 * KILLS):
        before = consumed(log)
        child = consume(cfg, work, total)
        if kills < KILLS:
            # Kill once the child has gone past where the last one stopped: half the time just
            # as it writes a checkpoint (the record of step k*EVERY-1 comes right before it),
            # else at a random later step; then after a random few hundred microseconds.
            step = before + rng.randint(1, 3 * EVERY)
            if rng.random() < 0.5:
                step = -(-step // EVERY) * EVERY
            deadline = time.monotonic() + RUN_TIMEOUT
            while child.poll() is None and consumed(log) < step and time.monotonic() < deadline:
                time.sleep(0.0002)
            time.sleep(rng.uniform(0, 0.001))
            if child.poll() is None:
                child.send_signal(signal.SIGKILL)
                kills += 1
                child.wait(timeout=RUN_TIMEOUT)
                mid_checkpoint += os.path.exists(os.path.join(work, "checkpoint.tmp"))
        out, err = child.communicate(timeout=RUN_TIMEOUT)
        if child.returncode == 0:
            break
        if not check(child.returncode == -signal.SIGKILL, f"{name}: the consumer failed ({child.returncode}): {err}"):
            return 0
    else:
        check(False, f"{name}: the consumer never finished")
        return 0
    check(kills >= KILLS - 1, f"{name}: only {kills} kills landed")
    got = records(log)
    check([s for s, _ in got] == list(range(total)), f"{name}: a step is missing or repeated: {[s for s, _ in got]}")
    check(got == expected, f"{name}: the batches differ from the uninterrupted run's")
    check_audit_logs(name, audit_dir, kills, epochs)
    print(f"{name}: {total} steps, {kills} kills ({mid_checkpoint} while writing the checkpoint)")
    return mid_checkpoint


with tempfile.TemporaryDirectory() as tmp:
    sft = os.path.join(tmp, "sft")
    stream = os.path.join(tmp, "stream")
    write_episodes(sft)
    write_stream(stream)
    shape = "<batch_size>4</batch_size><block_size>32</block_size>"
    world2 = "<batch_size>2</batch_size><block_size>32</block_size><world_size>2</world_size>"
    packed = "<block_size>64</block_size><dataset_mode>sft_packed</dataset_mode>"
    mixture = (f'<mixture><source name="chat" dataset_dir="{sft}" weight="3"/>'
               f'<source name="web" dataset_dir="{stream}" weight="1" dataset_mode="token_stream" '
               f'batch_sampling_mode="random" document_aware="true"/>'
               '<stage until_step="20"/><stage><weight source="chat">1</weight><weight source="web">2</weight>'
               '</stage></mixture>')
    packed_mixture = (f'<mixture><source name="a" dataset_dir="{sft}" weight="2"/>'
                      f'<source name="b" dataset_dir="{sft}" weight="1" epoch_seed="9"/></mixture>')
    # (name, config body, steps, whether the steps cross an epoch boundary of train)
    cases = [
        # 15 batches per epoch
        ("sft_episode-epoch", f"<dataset_dir>{sft}</dataset_dir>{shape}<batch_sampling_mode>epoch</batch_sampling_mode>",
         120, True),
        ("sft_episode-random-world2", f"<dataset_dir>{sft}</dataset_dir>{world2}<rank>1</rank>"
         "<batch_sampling_mode>random</batch_sampling_mode>", 120, False),
        # about 5 batches per epoch
        ("sft_packed-epoch-world2", f"<dataset_dir>{sft}</dataset_dir><batch_size>2</batch_size><world_size>2</world_size>"
         f"<rank>0</rank>{packed}", 100, True),
        # about 22 batches per epoch
        ("token_stream-epoch", f"<dataset_dir>{stream}</dataset_dir>{shape}<dataset_mode>token_stream</dataset_mode>"
         "<batch_sampling_mode>epoch</batch_sampling_mode>", 120, True),
        ("token_stream-random-world2", f"<dataset_dir>{stream}</dataset_dir>{world2}<rank>1</rank>"
         "<dataset_mode>token_stream</dataset_mode><batch_sampling_mode>random</batch_sampling_mode>", 120, False),
        # chat (epoch) and web (random) rows in one batch, across a stage; chat's 60 episodes
        # last about 20 steps at rows 2 x 2.
        ("mixture-world2", f"{world2}<rank>1</rank>{mixture}", 120, True),
        ("mixture-sft_packed", f"<batch_size>4</batch_size>{packed}{packed_mixture}", 100, True),
    ]
    started = time.monotonic()
    mid_checkpoint = 0
    for name, body, total, epochs in cases:
        t = time.monotonic()
        mid_checkpoint += soak(tmp, name, body, total, epochs)
        print(f"{name}: {time.monotonic() - t:.1f} s")
    print(f"all cases: {time.monotonic() - started:.1f} s")
    # checkpoint.tmp left behind: a kill landed between creating the new checkpoint and
    # renaming it over the old one, and the restart still resumed exactly.
    check(mid_checkpoint >= 1, "no kill landed while a checkpoint was being written")

print(f"kill_soak: {len(failures)} failed")
sys.exit(1 if failures else 0)
