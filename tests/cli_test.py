#!/usr/bin/env python3
"""End-to-end checks of the `tokenfeed` command: dump, resume through state files, inspect,
prepare (output, summary, bad lines, interruption), and a one-line error with the documented
exit status for each kind of bad input.

Usage: cli_test.py PATH/TO/tokenfeed   (standard library only; run by ctest)"""
import hashlib
import json
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

from cli_support import TOKENFEED, check, finish, read_npy, run, write_config


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


def expect_error(result, what, *needles, status=None):
    """One line on stderr naming each needle, and a status in 1..127 (exactly `status` if given)."""
    lines = result.stderr.strip().splitlines()
    check(1 <= result.returncode <= 127, f"{what}: exit status {result.returncode} should be in 1..127")
    if status is not None:
        check(result.returncode == status, f"{what}: exit status {result.returncode}, expected {status}: {result.stderr!r}")
    check(len(lines) == 1, f"{what}: expected one line on stderr, got {lines!r}")
    for needle in needles:
        check(needle in result.stderr, f"{what}: stderr should name {needle!r}: {result.stderr!r}")


def chat(*messages):
    """One JSONL line of the chat format from (role, content) pairs."""
    return json.dumps({"messages": [{"role": r, "content": c} for r, c in messages]})


def split_point(messages, seed):
    """The documented split rule (src/prepare/prepare.hpp), with Python's hashlib."""
    h = hashlib.sha256(b"tokenfeed-split-v1\0" + struct.pack("<Q", seed))
    for role, content in messages:
        data = content.encode()
        h.update(role.encode() + b"\0" + struct.pack("<Q", len(data)) + data)
    return (int.from_bytes(h.digest()[:8], "big") >> 11) * 2.0 ** -53


def staging_dirs(parent, name):
    """The temporary directories of a prepare into parent/name."""
    return sorted(e for e in os.listdir(parent) if e.startswith(f".{name}.tmp-"))


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "data")
    write_split(data, "train", [[1000 * e + p + 1 for p in range(3 + (e * 7) % 20)] for e in range(42)])
    write_split(data, "val", [[5, 6, 7, 8]] * 6)
    with open(os.path.join(data, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0, "vocab_size": 50000}, f)
    config = os.path.join(tmp, "train.xml")
    write_config(config, "data", batch_size=4, block_size=8, use_loss_mask=True, epoch_drop_last=False)

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
    write_config(packed_config, "data", dataset_mode="sft_packed", batch_size=2, block_size=32, use_loss_mask=True,
                 epoch_drop_last=False)
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
    write_config(stream_config, "stream", batch_size=4, block_size=32, document_aware=True)
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
    with open(os.path.join(stream, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16"}, f)  # no end-of-text id, and part_0.bin indexes no documents
    expect_error(run("dump", "--config", stream_config, "--out", tmp), "document_aware without eos", "eos_token_id")
    os.remove(os.path.join(stream, "dataset_metadata.json"))

# Exit statuses of bad command lines, for every subcommand: 2 for usage, 3 for a missing file,
# 0 for --help and --version (CLI11's own codes, 105..109, must not leak out).
with tempfile.TemporaryDirectory() as tmp:
    config = os.path.join(tmp, "c.xml")
    write_config(config, "d", batch_size=1, block_size=4)
    expect_error(run(), "no subcommand", "subcommand", status=2)
    expect_error(run("frobnicate"), "unknown subcommand", status=2)
    for command in ("run", "dump", "bench"):
        expect_error(run(command), f"{command} without --config", "--config", status=2)
        expect_error(run(command, "--config", os.path.join(tmp, "nope.xml")), f"{command} missing config",
                     "nope.xml", status=3)
        expect_error(run(command, "--config", config, "--split", "test"), f"{command} bad --split", "--split", status=2)
        expect_error(run(command, "--config", config, "--batches", "x"), f"{command} bad --batches", "--batches",
                     status=2)
    expect_error(run("dump", "--config", config, "--out", tmp, "--load-state", os.path.join(tmp, "nope.json")),
                 "dump missing state", "nope.json", status=3)
    expect_error(run("inspect"), "inspect without a directory", status=2)
    expect_error(run("inspect", tmp, "--pack-lookahead", "0"), "inspect bad --pack-lookahead", "--pack-lookahead",
                 status=2)
    expect_error(run("inspect", tmp, "--no-such-option"), "inspect unknown option", "--no-such-option", status=2)
    for command in ("run", "dump", "inspect", "prepare", "prepare-text", "bench", "show", "audit"):
        r = run(command, "--help")
        check(r.returncode == 0 and "--help" in r.stdout and not r.stderr, f"{command} --help: {r.returncode} {r.stderr!r}")
    check(run("--help").returncode == 0, "--help exits 0")
    check(run("--version").returncode == 0, "--version exits 0")

# prepare: the help, the output and its summary, bad lines, exit statuses, interruption.
with tempfile.TemporaryDirectory() as tmp:
    r = run("prepare", "--help")
    check(r.returncode == 0, f"prepare --help: {r.returncode}")
    for needle in ('{"messages": [{"role": "system", "content": "You are terse."}', '"role": "tool"', '"ids"',
                   "--special-tokens", "--special-token-strings", "--system-text", "--on-error", "--val-split",
                   "dataset_mode=sft_episode", "Exit status", "SIGTERM"):
        check(needle in r.stdout, f"prepare --help lacks {needle!r}")

    conversations = [
        (("user", "What is 2+2?"), ("assistant", "4.")),
        (("system", "You are terse."), ("user", "Capital of France?"), ("assistant", "Paris.")),
        (("user", "Weather in Oslo?"), ("assistant", "get_weather(\"Oslo\")"), ("tool", "{\"temp_c\": 3}"),
         ("assistant", "It is 3 C in Oslo.")),
        (("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye"), ("assistant", "Goodbye.")),
    ]
    good = os.path.join(tmp, "chats.jsonl")
    with open(good, "w") as f:
        f.write("".join(chat(*c) + "\n" for c in conversations))

    # A clean run: summary on stdout, nothing on stderr, a dataset that loads.
    out = os.path.join(tmp, "ds")
    r = run("prepare", "--input", good, "--output-dir", out, "--val-split", "0")
    check(r.returncode == 0 and r.stderr == "", f"prepare: {r.returncode} {r.stderr!r}")
    for needle in (f"tokenfeed prepare: wrote {out}", "4 lines", "train      4 conversations",
                   "val        no conversations (not written)", "skipped    0 lines", "bytes, vocab 261",
                   "token dtype uint16", "eot id 260"):
        check(needle in r.stdout, f"prepare summary lacks {needle!r}: {r.stdout}")
    meta = json.load(open(os.path.join(out, "dataset_metadata.json")))
    check(meta["splits"]["train"]["episodes"] == 4 and meta["vocab_size"] == 261, f"metadata: {meta['splits']}")
    check(meta["tokenfeed_version"] == run("--version").stdout.split()[1], "metadata records the tokenfeed version")
    check(not os.path.exists(os.path.join(out, "val")) and staging_dirs(tmp, "ds") == [], "no val/, no temporary dir")
    ds_config = os.path.join(tmp, "ds.xml")
    write_config(ds_config, "ds", batch_size=4, block_size=128, use_loss_mask=True, epoch_shuffle=False)
    dumped = os.path.join(tmp, "dumped")
    r = run("dump", "--config", ds_config, "--batches", "1", "--out", dumped)
    check(r.returncode == 0, f"dump of the prepared dataset: {r.stderr}")
    _, shape, xs = read_npy(os.path.join(dumped, "x.npy"))
    _, _, ys = read_npy(os.path.join(dumped, "y.npy"))
    _, _, ms = read_npy(os.path.join(dumped, "mask.npy"))
    check(shape == (4, 128), f"x.npy shape {shape}")
    x = struct.unpack(f"<{4 * 128}q", xs)
    y = struct.unpack(f"<{4 * 128}q", ys)
    mask = struct.unpack(f"<{4 * 128}f", ms)
    for row, messages in enumerate(conversations):  # unshuffled: row i is conversation i
        trained = bytes(v for v, m in zip(y[row * 128:(row + 1) * 128], mask[row * 128:(row + 1) * 128])
                        if m != 0 and v < 256)
        ends = sum(1 for v, m in zip(y[row * 128:(row + 1) * 128], mask[row * 128:(row + 1) * 128]) if m != 0 and v == 260)
        replies = [c for r_, c in messages if r_ == "assistant"]
        check(trained == "".join(replies).encode(), f"row {row} trains on the assistant replies: {trained!r}")
        check(ends == len(replies), f"row {row} trains on each reply's end-of-turn")
        check(x[row * 128] == 256, f"row {row} starts with the system token")

    # Progress into a pipe: a plain line every --progress-seconds (5 by default), none at the end.
    many = os.path.join(tmp, "many.jsonl")
    with open(many, "w") as f:
        f.write("".join(chat(*conversations[i % 4]) + "\n" for i in range(20000)))
    r = run("prepare", "--input", many, "--output-dir", os.path.join(tmp, "many_ds"), "--val-split", "0",
            "--progress-seconds", "0")
    progress = [line for line in r.stderr.splitlines() if line.startswith("tokenfeed prepare: ")]
    check(r.returncode == 0 and progress and all(" read, " in line and "tokens/s" in line for line in progress)
          and "\r" not in r.stderr, f"prepare progress lines: {r.returncode} {r.stderr[:500]!r}")

    # show: the rows decoded with the dataset's tokenizer, the trained targets marked: [[...]]
    # when stdout is no terminal, ANSI colour with --color always, an HTML page with --html.
    r = run("show", "--config", ds_config, "--rows", "4")
    check(r.returncode == 0 and r.stderr == "", f"show: {r.returncode} {r.stderr!r}")
    check("decoded with the dataset's tokenizer" in r.stdout, f"show header: {r.stdout[:300]!r}")
    check("<|system|>you are a helpful assistant.<|eot|><|user|>What is 2+2?<|eot|><|assistant|>[[4.]][[<|eot|>]]"
          in r.stdout, f"show row 0: {r.stdout!r}")
    check("<|tool|>{\"temp_c\": 3}<|eot|><|assistant|>[[It is 3 C in Oslo.]][[<|eot|>]]" in r.stdout,
          f"show: the tool reply is not trained, the answer is: {r.stdout!r}")
    check("<|pad|> x " in r.stdout and "\x1b[" not in r.stdout, "show: padding collapsed, no colour into a pipe")
    r = run("show", "--config", ds_config, "--rows", "1", "--color", "always")
    check("\x1b[32m4.\x1b[0m" in r.stdout, f"show --color always: {r.stdout!r}")
    page = os.path.join(tmp, "show.html")
    r = run("show", "--config", ds_config, "--batch", "0", "--rows", "2", "--html", page)
    check(r.returncode == 0 and os.path.exists(page), f"show --html: {r.stderr}")
    html = open(page, encoding="utf-8").read() if os.path.exists(page) else ""
    check('<span class="t">Paris.</span>' in html and "&lt;|user|&gt;" in html, f"show --html page: {html[-600:]!r}")
    plain = os.path.join(tmp, "plain")
    write_split(plain, "train", [[5, 6, 7, 8]] * 6)
    with open(os.path.join(plain, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0}, f)
    plain_config = os.path.join(tmp, "plain.xml")
    write_config(plain_config, "plain", batch_size=2, block_size=8)
    r = run("show", "--config", plain_config, "--rows", "1")
    check(r.returncode == 0 and "token ids (no tokenizer_state.json)" in r.stdout and "[[6 ]]" in r.stdout,
          f"show without a tokenizer prints ids: {r.stdout!r} {r.stderr!r}")
    expect_error(run("show", "--config", ds_config, "--split", "val"), "show a missing split", "val")

    # Bad lines: fail (status 4, line number, nothing left) or skip (counted in the summary).
    bad = os.path.join(tmp, "bad.jsonl")
    with open(bad, "w") as f:
        f.write(chat(*conversations[0]) + "\n" + chat(*conversations[1]) + "\n{not json\n" +
                chat(("user", "no reply")) + "\n" + chat(*conversations[3]) + "\n")
    r = run("prepare", "--input", bad, "--output-dir", os.path.join(tmp, "bad_out"), "--val-split", "0")
    expect_error(r, "prepare bad line", "bad.jsonl:3: invalid_json", status=4)
    check(not os.path.exists(os.path.join(tmp, "bad_out")) and staging_dirs(tmp, "bad_out") == [],
          "a failed prepare leaves nothing")
    r = run("prepare", "--input", bad, "--output-dir", os.path.join(tmp, "bad_out"), "--val-split", "0",
            "--on-error", "skip")
    check(r.returncode == 0, f"prepare --on-error skip: {r.stderr}")
    for needle in ("train      3 conversations", "skipped    2 lines", "invalid_json: 1 (first at line 3",
                   "no_assistant_turn: 1 (first at line 4"):
        check(needle in r.stdout, f"prepare skip summary lacks {needle!r}: {r.stdout}")
    meta = json.load(open(os.path.join(tmp, "bad_out", "dataset_metadata.json")))
    check(meta["skipped"]["invalid_json"] == 1 and meta["skipped"]["no_assistant_turn"] == 1, "skips in the metadata")
    r = run("prepare", "--input", bad, "--output-dir", os.path.join(tmp, "long_out"), "--val-split", "0",
            "--max-line-bytes", "40")
    expect_error(r, "prepare --max-line-bytes", "bad.jsonl:1: line_too_long", status=4)

    # Exit statuses of bad options and inputs.
    special = os.path.join(tmp, "special.json")
    with open(special, "w") as f:
        json.dump({"system": 1, "user": 2, "assistant": 3, "tol": 4, "eot": 0, "vocab_size": 100}, f)
    ids_input = os.path.join(tmp, "ids.jsonl")
    with open(ids_input, "w") as f:
        f.write(json.dumps({"messages": [{"role": "user", "ids": [10]}, {"role": "assistant", "ids": [11]}]}) + "\n")
    o = os.path.join(tmp, "o")
    expect_error(run("prepare", "--output-dir", o), "prepare without --input", "--input", status=2)
    expect_error(run("prepare", "--input", good), "prepare without --output-dir", "--output-dir", status=2)
    expect_error(run("prepare", "--input", os.path.join(tmp, "nope.jsonl"), "--output-dir", o),
                 "prepare missing input", "nope.jsonl", status=3)
    expect_error(run("prepare", "--input", tmp, "--output-dir", o), "prepare input is a directory", status=3)
    expect_error(run("prepare", "--input", good, "--output-dir", o, "--val-split", "2"), "--val-split 2",
                 "--val-split", status=2)
    expect_error(run("prepare", "--input", good, "--output-dir", o, "--val-split", "1"), "--val-split 1",
                 "[0, 1)", status=2)
    expect_error(run("prepare", "--input", good, "--output-dir", o, "--token-dtype", "int8"), "--token-dtype int8",
                 "--token-dtype", status=2)
    expect_error(run("prepare", "--input", good, "--output-dir", o, "--tokenizer", "gpt2"), "--tokenizer gpt2",
                 "gpt2", status=2)
    expect_error(run("prepare", "--input", good, "--output-dir", o, "--tokenizer", "sentencepiece:" +
                     os.path.join(tmp, "nope.model")), "missing model", "nope.model", status=3)
    expect_error(run("prepare", "--input", ids_input, "--output-dir", o, "--tokenizer", "bytes", "--special-tokens",
                     special), "--tokenizer with --special-tokens", "excludes", status=2)
    expect_error(run("prepare", "--input", ids_input, "--output-dir", o, "--system-text", "Be brief.",
                     "--special-tokens", special), "--system-text with --special-tokens", "--system-text", status=2)
    expect_error(run("prepare", "--input", ids_input, "--output-dir", o, "--special-tokens", special),
                 "unknown key in --special-tokens", "special.json", '"tol"', status=2)
    expect_error(run("prepare", "--input", good, "--output-dir", out), "non-empty output", "not empty", status=2)
    check(not os.path.exists(o), "no output after the errors")

    # --hf-tokenizer hands the run to the Python package (python/tests/test_hf_prepare.py runs
    # it end to end); here: its options' conflicts, and the errors when Python or the package
    # is missing.
    hf_dir = os.path.join(tmp, "hf_tok")
    os.makedirs(hf_dir)
    expect_error(run("prepare", "--input", good, "--output-dir", o, "--hf-tokenizer", hf_dir, "--tokenizer", "bytes"),
                 "--hf-tokenizer with --tokenizer", "excludes", status=2)
    expect_error(run("prepare", "--input", good, "--output-dir", o, "--hf-tokenizer", hf_dir, "--system-text", "x"),
                 "--hf-tokenizer with --system-text", "excludes", status=2)
    expect_error(run("prepare", "--input", good, "--output-dir", o, "--messages-field", "conv"),
                 "--messages-field without --hf-tokenizer", "--hf-tokenizer", status=2)
    expect_error(run("prepare", "--input", good, "--output-dir", o, "--workers", "2"),
                 "--workers without --hf-tokenizer", "--hf-tokenizer", status=2)
    no_python = dict(os.environ, TOKENFEED_PYTHON=os.path.join(tmp, "no-such-python"))
    r = subprocess.run([TOKENFEED, "prepare", "--input", good, "--output-dir", o, "--hf-tokenizer", hf_dir],
                       capture_output=True, text=True, timeout=120, env=no_python)
    expect_error(r, "--hf-tokenizer without Python", "no-such-python", "tokenfeed[hf]", status=2)
    bare = subprocess.run([sys.executable, "-c", "import tokenfeed.hf_prepare"], capture_output=True)
    if bare.returncode != 0:  # this Python lacks the package: the command says what to install
        r = subprocess.run([TOKENFEED, "prepare", "--input", good, "--output-dir", o, "--hf-tokenizer", hf_dir],
                           capture_output=True, text=True, timeout=120, env=dict(os.environ, TOKENFEED_PYTHON=sys.executable))
        expect_error(r, "--hf-tokenizer without the package", "pip install 'tokenfeed[hf]'", status=2)
    check(not os.path.exists(o), "no output after the --hf-tokenizer errors")

    # The split rule is the documented one (checked with hashlib): a conversation lands in val
    # exactly when its point is below --val-split, and train must not end up empty.
    single = os.path.join(tmp, "single.jsonl")
    with open(single, "w") as f:
        f.write(chat(*conversations[0]) + "\n")
    u = split_point(conversations[0], 0)
    above, below = f"{(u + 1) / 2:.17g}", f"{u / 2:.17g}"  # u < above < 1, below < u
    r = run("prepare", "--input", single, "--output-dir", os.path.join(tmp, "all_val"), "--val-split", above)
    expect_error(r, "every conversation in val", "single.jsonl", "the only conversation landed in val", status=4)
    check(not os.path.exists(os.path.join(tmp, "all_val")) and staging_dirs(tmp, "all_val") == [],
          "an empty train split leaves nothing")
    r = run("prepare", "--input", single, "--output-dir", os.path.join(tmp, "one_train"), "--val-split", below)
    check(r.returncode == 0 and "train      1 conversation," in r.stdout, f"the conversation is train's: {r.stdout}")

    # Interruption. A FIFO as input keeps the run going for as long as the test feeds it, so
    # the signal always arrives mid-run, however fast or slow the machine is.
    def feed(fifo, stop):
        line = (chat(*conversations[2]) + "\n").encode() * 64
        try:
            with open(fifo, "wb") as f:  # blocks until prepare opens it
                while not stop.is_set():
                    f.write(line)
        except (BrokenPipeError, OSError):
            pass  # prepare is gone

    def start_fed_prepare(name):
        fifo = os.path.join(tmp, name + ".jsonl")
        os.mkfifo(fifo)
        stop = threading.Event()
        feeder = threading.Thread(target=feed, args=(fifo, stop), daemon=True)
        feeder.start()
        p = subprocess.Popen([TOKENFEED, "prepare", "--input", fifo, "--output-dir", os.path.join(tmp, name)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and p.poll() is None:  # under way: its temporary dir is filling
            dirs = staging_dirs(tmp, name)
            if dirs and os.listdir(os.path.join(tmp, dirs[0])):
                break
            time.sleep(0.02)
        check(p.poll() is None and staging_dirs(tmp, name), f"{name}: prepare is under way")
        time.sleep(0.2)
        return p, stop, feeder

    for sig in (signal.SIGTERM, signal.SIGINT):
        name = f"interrupted_{sig.name}"
        p, stop, feeder = start_fed_prepare(name)
        p.send_signal(sig)
        try:
            _, err = p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            _, err = p.communicate()
            check(False, f"{sig.name}: prepare did not stop")
        stop.set()
        feeder.join(timeout=10)
        # Ended by the signal itself (a shell shows 128 + signal: 143, 130), one line on stderr.
        check(p.returncode == -sig, f"{sig.name}: returncode {p.returncode}, expected {-sig}")
        check(len(err.strip().splitlines()) == 1 and f"interrupted by {sig.name}" in err, f"{sig.name}: {err!r}")
        check(staging_dirs(tmp, name) == [], f"{sig.name}: the temporary directory was removed")
        check(not os.path.exists(os.path.join(tmp, name)), f"{sig.name}: no output directory")

    # SIGKILL cannot be caught: the temporary directory stays until the next run into the same
    # output, which removes it (its process is gone) and succeeds.
    p, stop, feeder = start_fed_prepare("killed")
    p.kill()
    p.communicate()
    stop.set()
    feeder.join(timeout=10)
    leftovers = staging_dirs(tmp, "killed")
    check(len(leftovers) == 1 and not os.path.exists(os.path.join(tmp, "killed")),
          f"SIGKILL leaves the temporary directory only: {leftovers}")
    # What it left is never taken for a dataset, by inspect or by a run.
    if leftovers:
        staging = os.path.join(tmp, leftovers[0])
        expect_error(run("inspect", staging), "inspect of a killed prepare's staging directory", staging,
                     "the staging directory of an unfinished `tokenfeed prepare`")
        write_config(os.path.join(tmp, "staging.xml"), staging, batch_size=2, block_size=8)
        expect_error(run("run", "--config", os.path.join(tmp, "staging.xml"), "--batches", "1"),
                     "run on a killed prepare's staging directory", "the staging directory of an unfinished")
    os.remove(os.path.join(tmp, "killed.jsonl"))
    r = run("prepare", "--input", good, "--output-dir", os.path.join(tmp, "killed"), "--val-split", "0")
    check(r.returncode == 0, f"prepare after a killed run: {r.stderr}")
    check(leftovers and f"removed    {os.path.join(tmp, leftovers[0])} (left by an earlier run that was killed)"
          in r.stdout, f"the summary reports the removed directory: {r.stdout}")
    check(staging_dirs(tmp, "killed") == [], "the killed run's temporary directory is gone")

# audit: an audit log read back with the library's reader: the events by action, the dataset
# load, each epoch's order and whether it completed; a torn last line reported (status 0), a
# forged line an error naming it (4), a missing log 3, no log 2.
with tempfile.TemporaryDirectory() as tmp:
    write_split(os.path.join(tmp, "data"), "train", [[e + 1] * (2 + e % 5) for e in range(10)])
    with open(os.path.join(tmp, "data", "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0}, f)
    logs = os.path.join(tmp, "logs")
    config = os.path.join(tmp, "c.xml")
    write_config(config, "data", audit_log_dir=logs, batch_size=2, block_size=8, epoch_seed=11)
    r = run("run", "--config", config, "--batches", "12")  # 5 batches an epoch: epochs 0 and 1 end, 2 opens
    check(r.returncode == 0, f"run with an audit log: {r.stderr}")
    (name,) = os.listdir(logs)
    log = os.path.join(logs, name)
    r = run("audit", log)
    check(r.returncode == 0 and not r.stderr, f"audit: {r.returncode} {r.stderr}")
    for needle in (f"tokenfeed audit: {log}", "events     6: dataset_load 1, epoch_start 3, epoch_complete 2",
                   "load       line 1: dataset_dir=", "epochs     3",
                   "train epoch 0 rank 0: started line 2 (seed=11, shuffle=true, num_episodes=10, batches=5, "
                   "first_episode_ids=", "completed line 3 (seed_used=11, episodes_seen=10, episodes_skipped=0)",
                   "train epoch 2 rank 0: started line 6 (seed=13", "; not completed"):
        check(needle in r.stdout, f"audit should print {needle!r}: {r.stdout}")
    check("torn" not in r.stdout, f"a clean log has no torn line: {r.stdout}")
    with open(log, "a") as f:
        f.write("2026-01-01T00:00:00.000Z | TRAINING | INFO | action=epoch_complete | split=\"tra")
    r = run("audit", log)
    check(r.returncode == 0 and "  torn       line 7 was cut short (the process was killed while writing it), 79 "
          "bytes: 2026-01-01T00:00:00.000Z | TRAINING | INFO | action=epoch_complete | split=\"tra" in r.stdout,
          f"audit reports a torn last line: {r.returncode} {r.stdout}")
    with open(log) as f:
        lines = f.readlines()
    lines.insert(2, "2026-01-01T00:00:00.000Z | TRAINING | INFO | action=epoch_start | note=a\x01b\n")
    with open(log, "w") as f:
        f.writelines(lines)
    expect_error(run("audit", log), "audit of a forged line", "line 3 is not an audit event", status=4)
    expect_error(run("audit", os.path.join(tmp, "nope.log")), "audit of a missing log", "nope.log", status=3)
    expect_error(run("audit"), "audit without a log", status=2)
    # A mixture's log: its stages, and each source's epochs on their own lines.
    write_split(os.path.join(tmp, "code"), "train", [[50 + e] * 3 for e in range(4)])
    with open(os.path.join(tmp, "code", "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0}, f)
    mix_logs = os.path.join(tmp, "mixlogs")
    with open(os.path.join(tmp, "mix.xml"), "w") as f:
        f.write(f"<training><batch_size>2</batch_size><block_size>8</block_size><audit_log_dir>{mix_logs}"
                "</audit_log_dir><mixture><source name=\"chat\" dataset_dir=\"data\" weight=\"1\"/>"
                "<source name=\"code\" dataset_dir=\"code\" weight=\"1\"/><stage until_step=\"2\"/>"
                "<stage><weight source=\"chat\">1</weight></stage></mixture></training>")
    r = run("run", "--config", os.path.join(tmp, "mix.xml"), "--batches", "6")
    check(r.returncode == 0, f"mixture run with an audit log: {r.stderr}")
    (name,) = os.listdir(mix_logs)
    r = run("audit", os.path.join(mix_logs, name))
    for needle in ('stage      line 2: split=train stage=0 step=0 weights="chat=1,code=1" rank=0',
                   "stage      line 5: split=train stage=1 step=2", "train source chat epoch 0 rank 0: started line",
                   "train source code epoch 0 rank 0: started line", "completed line"):
        check(r.returncode == 0 and needle in r.stdout, f"audit of a mixture's log should print {needle!r}: {r.stdout}")

# A mixture: dump writes source_ids.npy; inspect --config --steps shows the blend per stage
# and the epoch each source reaches.
with tempfile.TemporaryDirectory() as tmp:
    for name, count in (("chat", 12), ("code", 5)):
        write_split(os.path.join(tmp, name), "train", [[100 * e + p + 1 for p in range(4 + e % 5)] for e in range(count)])
        with open(os.path.join(tmp, name, "dataset_metadata.json"), "w") as f:
            json.dump({"token_dtype": "uint16", "eot_token_id": 0}, f)
    def write_mixture_config(name, mixture):
        """A 4 x 8 config of `mixture` (the <mixture> element) over tmp's chat and code."""
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write("<training><batch_size>4</batch_size><block_size>8</block_size><audit_log_dir></audit_log_dir>"
                    + mixture + "</training>")
        return path

    config = write_mixture_config(
        "mix.xml", "<mixture><source name=\"chat\" dataset_dir=\"chat\" weight=\"3\"/>"
        "<source name=\"code\" dataset_dir=\"code\" weight=\"1\" epoch_seed=\"7\"/>"
        "<stage until_step=\"3\"/><stage><weight source=\"chat\">1</weight></stage></mixture>")
    out = os.path.join(tmp, "mixdump")
    r = run("dump", "--config", config, "--batches", "5", "--out", out)
    check(r.returncode == 0, f"mixture dump failed: {r.stderr}")
    descr, shape, raw = read_npy(os.path.join(out, "source_ids.npy"))
    check(descr == "<i4" and shape == (5, 4), f"source_ids.npy header {descr} {shape}")
    ids = struct.unpack("<20i", raw)
    # 3:1 for steps 0..2 (12 rows), then 1:1.
    check(list(ids) == [0, 0, 1, 0] * 3 + [0, 1] * 4, f"source ids {ids}")
    r = run("inspect", "--config", config, "--steps", "10")
    check(r.returncode == 0, f"inspect --config failed: {r.stderr}")
    for needle in ("stage 0  steps 0..2", "stage 1  steps 3..9", "chat", "75.00%", "50.00%", "code"):
        check(needle in r.stdout, f"inspect --config should print {needle!r}: {r.stdout}")
    # 3*3 + 14 = 23 chat rows over 12 episodes: epoch 1; 3 + 14 = 17 code rows over 5: epoch 3.
    check("chat             epoch 1" in r.stdout and "code             epoch 3" in r.stdout, r.stdout)
    # The rank it describes is the settled one (0 without a launcher), never the config's "env" (-1).
    check("steps of rank 0 (4 x 8 per batch)" in r.stdout, f"inspect --config names rank 0: {r.stdout}")
    # Under a shape_schedule the batches take its stages' shapes (printed first), not the keys'.
    ramped = write_mixture_config(
        "ramped.xml", "<mixture><source name=\"chat\" dataset_dir=\"chat\" weight=\"3\"/>"
        "<source name=\"code\" dataset_dir=\"code\" weight=\"1\"/></mixture>"
        "<shape_schedule><stage until_step=\"2\" block_size=\"4\"/><stage/></shape_schedule>")
    r = run("inspect", "--config", ramped, "--steps", "4")
    check(r.returncode == 0 and "steps of rank 0 (batch shapes by the shape_schedule above)" in r.stdout
          and "4 x 8 per batch" not in r.stdout, f"inspect --config under a shape_schedule: {r.stdout} {r.stderr}")
    # A count it cannot show is refused at once, not read batch by batch for hours.
    started = time.monotonic()
    r = run("inspect", "--config", config, "--steps", "9223372036854775807")
    check(r.returncode == 2 and "inspect --steps 9223372036854775807: must be in [1, 10000000]" in r.stderr
          and time.monotonic() - started < 30, f"inspect --steps 2^63-1: {r.returncode} {r.stderr}")
    # Weights from dataset sizes: chat has 69 tokens (12 rows an epoch), code 30 (5 rows);
    # proportional to size code would take 30/99 of the 40 planned rows, more than its 2
    # epochs (10 rows): capped at 0.25, chat takes the rest.
    sized = write_mixture_config(
        "sized.xml", "<mixture temperature=\"1\" planned_steps=\"10\"><source name=\"chat\" dataset_dir=\"chat\" "
        "weight=\"auto\"/><source name=\"code\" dataset_dir=\"code\" weight=\"auto\" max_epochs=\"2\"/></mixture>")
    r = run("inspect", "--config", sized, "--steps", "20")
    check(r.returncode == 0, f"inspect --config of auto weights failed: {r.stderr}")
    for needle in ("weights from dataset sizes: temperature 1, planned_steps 10",
                   "chat                         69           12   0.750000     no          2.500          5.000",
                   "code                         30            5   0.250000    yes          2.000          4.000",
                   "75.00%", "25.00%"):
        check(needle in r.stdout, f"inspect --config of auto weights should print {needle!r}: {r.stdout}")
    check("chat(weight=0.750000" in r.stdout and
          "from_sizes(temperature=1 planned_steps=10 chat:tokens=69 epochs=2.500 code:tokens=30 epochs=2.000 capped)"
          in r.stdout, f"the open line names the computed weights: {r.stdout}")
    # The weights' table comes from the sources' splits, not from a second loader: one open
    # line for the mixture and one per source, as for any other mixture.
    check(r.stdout.count("[tokenfeed] mixture sources=") == 1 and r.stdout.count("[tokenfeed] opened ") == 2,
          f"inspect --config of auto weights opens the mixture once: {r.stdout}")
    # With a document-aware token-stream source, dump writes the document fields too: the
    # stream rows' doc_ids restart after each end-of-text (id 0 here), the episode rows' are 0.
    web = os.path.join(tmp, "web")
    os.makedirs(web)
    stream_tokens = [(i % 7) for i in range(400)]  # an end-of-text (0) every 7 tokens
    for split_name in ("train", "val"):
        with open(os.path.join(web, split_name + ".bin"), "wb") as f:
            f.write(struct.pack(f"<{len(stream_tokens)}H", *stream_tokens))
    with open(os.path.join(web, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eos_token_id": 0}, f)
    docs_config = os.path.join(tmp, "mixdocs.xml")
    with open(docs_config, "w") as f:
        f.write("<training><batch_size>4</batch_size><block_size>8</block_size><audit_log_dir></audit_log_dir>"
                "<mixture><source name=\"chat\" dataset_dir=\"chat\" weight=\"1\"/>"
                "<source name=\"web\" dataset_dir=\"web\" weight=\"1\" dataset_mode=\"token_stream\" "
                "document_aware=\"true\"/></mixture></training>")
    out = os.path.join(tmp, "mixdocs")
    r = run("dump", "--config", docs_config, "--batches", "3", "--out", out)
    check(r.returncode == 0, f"document-aware mixture dump failed: {r.stderr}")
    _, _, raw = read_npy(os.path.join(out, "source_ids.npy"))
    sources = struct.unpack("<12i", raw)
    _, _, raw = read_npy(os.path.join(out, "x.npy"))
    xs = struct.unpack("<96q", raw)
    for name in ("doc_ids", "position_ids"):
        descr, shape, raw = read_npy(os.path.join(out, name + ".npy"))
        check(descr == "<i4" and shape == (12, 8), f"{name}.npy header {descr} {shape}")
        values = struct.unpack("<96i", raw)
        for row in range(12):
            cells = values[row * 8:(row + 1) * 8]
            if sources[row] == 0:
                check(name != "doc_ids" or set(cells) == {0}, f"episode row {row} {name} {cells}")
                continue
            doc, pos = 0, 0
            for i in range(8):
                expect = doc if name == "doc_ids" else pos
                check(cells[i] == expect, f"stream row {row} {name}[{i}] = {cells[i]}, expected {expect}")
                if xs[row * 8 + i] == 0:
                    doc, pos = doc + 1, 0
                else:
                    pos += 1
    check(1 in sources, f"the stream source is drawn: {sources}")
    bad = os.path.join(tmp, "bad.xml")
    with open(bad, "w") as f:
        f.write("<training><batch_size>4</batch_size><block_size>8</block_size><audit_log_dir></audit_log_dir>"
                "<mixture><source name=\"chat\" dataset_dir=\"chat\" weight=\"1\" batch_size=\"2\"/>"
                "</mixture></training>")
    expect_error(run("inspect", "--config", bad), "mixture with a loader-wide attribute", "mixture source 'chat'",
                 "batch_size")

finish("cli_test")
