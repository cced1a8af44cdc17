#!/usr/bin/env python3
"""End-to-end checks of the `tokenfeed` command: dump, resume through state files, inspect,
and a one-line error with an exit status in 1..127 for each kind of bad input.

Usage: cli_test.py PATH/TO/tokenfeed   (standard library only; run by ctest)"""
import json
import os
import struct
import subprocess
import sys
import tempfile

TOKENFEED = sys.argv[1]
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(*args):
    return subprocess.run([TOKENFEED, *args], capture_output=True, text=True, timeout=120)


def read_npy(path):
    """(descr, shape, data bytes) of a version 1.0 .npy file."""
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:6] == b"\x93NUMPY" and raw[6] == 1, path
    (header_len,) = struct.unpack("<H", raw[8:10])
    header = eval(raw[10:10 + header_len].decode("latin1"))  # a Python dict literal, as numpy writes it
    assert not header["fortran_order"]
    assert (10 + header_len) % 64 == 0, "data must start 64-byte aligned"
    return header["descr"], header["shape"], raw[10 + header_len:]


def write_split(root, split, episodes, with_mask=True):
    """Writes tokens.bin (uint16), mask.bin (uint8) and episodes.idx for a list of token lists."""
    d = os.path.join(root, split, "shard_00000")
    os.makedirs(d)
    tokens, mask, index = bytearray(), bytearray(), bytearray()
    offset = 0
    for ep in episodes:
        index += struct.pack("<QQ", offset, len(ep))
        tokens += struct.pack(f"<{len(ep)}H", *ep)
        mask += bytes((i % 2) for i in range(len(ep)))
        offset += len(ep)
    with open(os.path.join(d, "tokens.bin"), "wb") as f:
        f.write(tokens)
    with open(os.path.join(d, "episodes.idx"), "wb") as f:
        f.write(index)
    if with_mask:
        with open(os.path.join(d, "mask.bin"), "wb") as f:
            f.write(mask)


def expect_error(result, what, *needles):
    lines = result.stderr.strip().splitlines()
    check(1 <= result.returncode <= 127, f"{what}: exit status {result.returncode} should be in 1..127")
    check(len(lines) == 1, f"{what}: expected one line on stderr, got {lines!r}")
    for needle in needles:
        check(needle in result.stderr, f"{what}: stderr should name {needle!r}: {result.stderr!r}")


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "data")
    write_split(data, "train", [[1000 * e + p + 1 for p in range(3 + (e * 7) % 20)] for e in range(42)])
    write_split(data, "val", [[5, 6, 7, 8]] * 6)
    with open(os.path.join(data, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0, "vocab_size": 50000}, f)
    config = os.path.join(tmp, "train.xml")
    with open(config, "w") as f:
        f.write("<training><dataset_dir>data</dataset_dir><batch_size>4</batch_size><block_size>8</block_size>"
                "<use_loss_mask>true</use_loss_mask><epoch_drop_last>false</epoch_drop_last>"
                "<audit_log_dir></audit_log_dir></training>")

    r = run("--version")
    check(r.returncode == 0 and r.stdout.startswith("tokenfeed "), f"--version: {r.stdout!r}")

    # dump: shapes and dtypes.
    full = os.path.join(tmp, "full")
    r = run("dump", "--config", config, "--batches", "13", "--out", full)
    check(r.returncode == 0, f"dump failed: {r.stderr}")
    descr, shape, x = read_npy(os.path.join(full, "x.npy"))
    check(descr == "<i8" and shape == (52, 8), f"x.npy header {descr} {shape}")
    descr, shape, _ = read_npy(os.path.join(full, "mask.npy"))
    check(descr == "<f4" and shape == (52, 8), f"mask.npy header {descr} {shape}")
    descr, shape, ids = read_npy(os.path.join(full, "episode_ids.npy"))
    check(descr == "<i8" and shape == (13, 4), f"episode_ids.npy header {descr} {shape}")
    id_values = struct.unpack(f"<{13 * 4}q", ids)
    # 42 episodes in batches of 4: epoch 0 is 11 batches, the last with 2 fill rows.
    check(sorted(v for v in id_values[:44] if v >= 0) == list(range(42)), "epoch 0 covers every episode once")
    check(id_values[42:44] == (-1, -1), "drop_last=false fills the last batch of the epoch")

    # resume through state files: 5 + 8 batches equal 13 straight ones, for every file.
    first, second, state = os.path.join(tmp, "a"), os.path.join(tmp, "b"), os.path.join(tmp, "state.json")
    check(run("dump", "--config", config, "--batches", "5", "--out", first, "--save-state", state).returncode == 0,
          "dump with --save-state")
    check(json.load(open(state))["splits"]["train"]["step"] == 5, "state records 5 consumed batches")
    r = run("dump", "--config", config, "--batches", "8", "--out", second, "--load-state", state)
    check(r.returncode == 0, f"dump with --load-state: {r.stderr}")
    for name in ("x.npy", "y.npy", "mask.npy", "episode_ids.npy"):
        whole = read_npy(os.path.join(full, name))[2]
        parts = read_npy(os.path.join(first, name))[2] + read_npy(os.path.join(second, name))[2]
        check(whole == parts, f"resumed {name} equals the straight run")

    # val split and the mask-off path.
    r = run("dump", "--config", config, "--split", "val", "--batches", "1", "--out", os.path.join(tmp, "v"))
    check(r.returncode == 0, f"val dump: {r.stderr}")

    # inspect.
    r = run("inspect", data, "--block-size", "8", "--deep")
    check(r.returncode == 0, f"inspect: {r.stderr}")
    for needle in ("split train", "sharded, 1 shard", "episodes     42", "dtype uint16", "mask         uint8",
                   "lengths      min 3", "episodes longer than block_size + 1", "truncation   right", "verdict      ok", "all-zero mask"):
        check(needle in r.stdout, f"inspect output lacks {needle!r}")

    # sft_packed: the dump proves the packing from outside.
    packed_config = os.path.join(tmp, "packed.xml")
    with open(packed_config, "w") as f:
        f.write("<training><dataset_dir>data</dataset_dir><dataset_mode>sft_packed</dataset_mode><batch_size>2</batch_size>"
                "<block_size>32</block_size><use_loss_mask>true</use_loss_mask><epoch_drop_last>false</epoch_drop_last>"
                "<audit_log_dir></audit_log_dir></training>")
    out = os.path.join(tmp, "packed_out")
    r = run("dump", "--config", packed_config, "--batches", "3", "--out", out)
    check(r.returncode == 0, f"packed dump: {r.stderr}")
    _, shape, seg = read_npy(os.path.join(out, "segments.npy"))
    check(shape[1] == 5 and shape[0] >= 6, f"segments.npy shape {shape}")
    segments = struct.unpack(f"<{shape[0] * 5}q", seg)
    xs = struct.unpack(f"<{6 * 32}q", read_npy(os.path.join(out, "x.npy"))[2])
    weights = struct.unpack(f"<{6 * 32}f", read_npy(os.path.join(out, "weights.npy"))[2])
    for k in range(shape[0]):
        batch, row, column, positions, episode = segments[5 * k:5 * k + 5]
        base = (batch * 2 + row) * 32 + column
        check(xs[base:base + positions] == tuple(1000 * episode + p + 1 for p in range(positions)),
              f"segment {k} holds episode {episode}'s tokens")
        check(weights[base:base + positions] == tuple(float(p % 2) for p in range(1, positions + 1)),
              f"segment {k} weights are the shifted mask")
    for name in ("y.npy", "position_ids.npy"):
        check(os.path.exists(os.path.join(out, name)), f"packed dump wrote {name}")
    r = run("inspect", data, "--block-size", "32", "--packed")
    check("packing      sft_packed:" in r.stdout and "sft_episode:" in r.stdout, f"inspect --packed: {r.stdout}")

    # Bad input: one line on stderr, a status in 1..127, naming the file or key.
    expect_error(run("dump", "--config", os.path.join(tmp, "nope.xml"), "--out", tmp), "missing config", "nope.xml")
    bad = os.path.join(tmp, "bad.xml")
    with open(bad, "w") as f:
        f.write("<training><batch_size>4</batch_size>")
    expect_error(run("dump", "--config", bad, "--out", tmp), "malformed XML", "bad.xml", "offset")
    with open(bad, "w") as f:
        f.write("<training><dataset_dir>data</dataset_dir><batch_size>4</batch_size><block_size>8</block_size>"
                "<use_mask>true</use_mask></training>")
    expect_error(run("dump", "--config", bad, "--out", tmp), "unknown key", "use_mask")
    with open(bad, "w") as f:
        f.write("<training><dataset_dir>data</dataset_dir><batch_size>-4</batch_size><block_size>8</block_size>"
                "</training>")
    expect_error(run("dump", "--config", bad, "--out", tmp), "negative size", "batch_size")
    with open(os.path.join(tmp, "other.json"), "w") as f:
        f.write(open(state).read().replace('"fingerprint":"', '"fingerprint":"0'))
    expect_error(run("dump", "--config", config, "--out", tmp, "--load-state", os.path.join(tmp, "other.json")),
                 "foreign state", "fingerprint")
    with open(os.path.join(data, "train", "shard_00000", "episodes.idx"), "ab") as f:
        f.write(b"\0" * 5)
    expect_error(run("dump", "--config", config, "--out", tmp), "corrupt index", "episodes.idx", "multiple of 16")
    expect_error(run("inspect", data), "inspect corrupt index", "episodes.idx")
    expect_error(run("inspect", os.path.join(tmp, "missing")), "inspect missing dir", "missing")

    # --deep catches token ids past vocab_size.
    deep = os.path.join(tmp, "deep")
    write_split(deep, "train", [[1, 2, 60000]])
    with open(os.path.join(deep, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "vocab_size": 50000}, f)
    r = run("inspect", deep, "--deep")
    check(r.returncode != 0 and "1 tokens >= vocab_size 50000" in r.stdout, f"--deep vocab check: {r.stdout}")

    # Token streams: nanoGPT-style train.bin/val.bin and a directory of .npy shards.
    stream = os.path.join(tmp, "stream")
    os.makedirs(stream)
    tokens = []
    for doc in range(200):
        tokens += [100 + (doc * 7 + i) % 50 for i in range(3 + doc % 17)] + [0]
    with open(os.path.join(stream, "train.bin"), "wb") as f:
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
    with open(os.path.join(stream, "val.bin"), "wb") as f:
        f.write(struct.pack(f"<{400}H", *tokens[:400]))
    with open(os.path.join(stream, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eos_token_id": 0}, f)
    stream_config = os.path.join(tmp, "stream.xml")
    with open(stream_config, "w") as f:
        f.write("<training><dataset_dir>stream</dataset_dir><batch_size>4</batch_size><block_size>32</block_size>"
                "<document_aware>true</document_aware><audit_log_dir></audit_log_dir></training>")
    out = os.path.join(tmp, "stream_out")
    r = run("dump", "--config", stream_config, "--batches", "6", "--out", out)
    check(r.returncode == 0, f"token-stream dump: {r.stderr}")
    for name, descr, shape in (("x.npy", "<i8", (24, 32)), ("y.npy", "<i8", (24, 32)), ("doc_ids.npy", "<i4", (24, 32)),
                               ("position_ids.npy", "<i4", (24, 32)), ("window_ids.npy", "<i8", (6, 4))):
        got = read_npy(os.path.join(out, name))
        check(got[:2] == (descr, shape), f"token-stream {name} header {got[:2]}")
    x = struct.unpack(f"<{24 * 32}q", read_npy(os.path.join(out, "x.npy"))[2])
    y = struct.unpack(f"<{24 * 32}q", read_npy(os.path.join(out, "y.npy"))[2])
    starts = struct.unpack("<24q", read_npy(os.path.join(out, "window_ids.npy"))[2])
    for row, start in enumerate(starts):
        check(list(x[row * 32:(row + 1) * 32]) == tokens[start:start + 32], f"row {row} is the window at {start}")
        for i in range(32):
            expected = -100 if x[row * 32 + i] == 0 else tokens[start + i + 1]
            check(y[row * 32 + i] == expected, f"row {row} label {i}")
    first, second, state = os.path.join(tmp, "s1"), os.path.join(tmp, "s2"), os.path.join(tmp, "stream_state.json")
    run("dump", "--config", stream_config, "--batches", "2", "--out", first, "--save-state", state)
    run("dump", "--config", stream_config, "--batches", "4", "--out", second, "--load-state", state)
    for name in ("x.npy", "doc_ids.npy", "window_ids.npy"):
        whole = read_npy(os.path.join(out, name))[2]
        check(whole == read_npy(os.path.join(first, name))[2] + read_npy(os.path.join(second, name))[2],
              f"token-stream resume: {name}")
    r = run("inspect", stream, "--block-size", "32", "--print-config")
    check(r.returncode == 0, f"token-stream inspect: {r.stderr}")
    for needle in ("split train (token stream)", "flat (train.bin)", "documents    200 end-of-text tokens (id 0)",
                   "windows per epoch", "<dataset_mode>token_stream</dataset_mode>", "<document_aware>true</document_aware>"):
        check(needle in r.stdout, f"token-stream inspect lacks {needle!r}: {r.stdout}")
    os.remove(os.path.join(stream, "val.bin"))
    os.makedirs(os.path.join(stream, "train"))
    os.rename(os.path.join(stream, "train.bin"), os.path.join(stream, "train", "part_0.bin"))
    r = run("dump", "--config", stream_config, "--batches", "1", "--out", os.path.join(tmp, "s3"))
    check(r.returncode == 0, f"token-stream dump from train/*.bin: {r.stderr}")
    with open(os.path.join(stream, "dataset_metadata.json"), "w") as f:
        json.dump({"eos_token_id": 0}, f)  # no token_dtype: a .bin file's dtype is unknown
    expect_error(run("dump", "--config", stream_config, "--out", tmp), ".bin without dtype", "part_0.bin", "token_dtype")
    os.remove(os.path.join(stream, "dataset_metadata.json"))
    expect_error(run("dump", "--config", stream_config, "--out", tmp), "document_aware without eos", "eos_token_id")

print(f"cli_test: {len(failures)} failed")
sys.exit(1 if failures else 0)
