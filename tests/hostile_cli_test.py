#!/usr/bin/env python3
"""Hostile input through the `tokenfeed` command: deeply nested JSON, FIFOs, device files,
forged audit lines, unbounded memory requests, a SentencePiece model that makes the
library throw, symbolic link loops and inputs that match no file. Each ends in one line on stderr and the documented exit status, never a
crash or a hang.

Usage: hostile_cli_test.py PATH/TO/tokenfeed   (standard library only; run by ctest)"""
import json
import os
import struct
import tempfile

from cli_support import check, finish, run, write_config

DEEP = 200_000


def nested(depth):
    return "[" * depth + "]" * depth


def expect(result, what, status, *needles):
    # The loader's warnings about the (mask-less) test datasets are not part of the verdict.
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("[tokenfeed] warning:")]
    check(result.returncode == status, f"{what}: exit status {result.returncode}, expected {status}: {result.stderr[:300]!r}")
    check(len(lines) == 1 and len(lines[0]) < 600, f"{what}: expected one short line on stderr: {result.stderr[:300]!r}")
    for needle in needles:
        check(needle in result.stderr, f"{what}: stderr should name {needle!r}: {result.stderr[:300]!r}")


def write_episodes(root, n=16):
    d = os.path.join(root, "train")
    os.makedirs(d)
    tokens, index = bytearray(), bytearray()
    for e in range(n):
        ep = [1 + e, 2, 3, 4, 5]
        index += struct.pack("<QQ", len(tokens) // 2, len(ep))
        tokens += struct.pack(f"<{len(ep)}H", *ep)
    with open(os.path.join(d, "tokens.bin"), "wb") as f:
        f.write(tokens)
    with open(os.path.join(d, "episodes.idx"), "wb") as f:
        f.write(index)
    with open(os.path.join(root, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0}, f)


def sentencepiece_piece(text, piece_type):
    body = b"\x0a" + bytes([len(text)]) + text + b"\x15\0\0\0\0" + b"\x18" + bytes([piece_type])
    return b"\x0a" + bytes([len(body)]) + body


with tempfile.TemporaryDirectory() as tmp:
    data = os.path.join(tmp, "data")
    write_episodes(data)
    config = os.path.join(tmp, "c.xml")
    write_config(config, data, batch_size=2, block_size=8)

    # Deeply nested JSON: a resume state, the dataset metadata, a special-tokens file.
    state = os.path.join(tmp, "state.json")
    with open(state, "w") as f:
        f.write('{"format":"tokenfeed-state","version":' + nested(DEEP) + "}")
    expect(run("dump", "--config", config, "--batches", "1", "--out", os.path.join(tmp, "d1"), "--load-state", state),
           "deep resume state", 5, "nesting deeper than 64")
    deep_meta = os.path.join(tmp, "deep_meta")
    write_episodes(deep_meta)
    with open(os.path.join(deep_meta, "dataset_metadata.json"), "w") as f:
        f.write('{"token_dtype":' + nested(DEEP) + "}")
    expect(run("inspect", deep_meta), "deep metadata (inspect)", 4, "nesting deeper than 64")
    deep_config = os.path.join(tmp, "deep_meta.xml")
    write_config(deep_config, deep_meta, batch_size=2, block_size=8)
    expect(run("run", "--config", deep_config, "--batches", "1"), "deep metadata (run)", 4, "nesting deeper than 64")

    # A JSONL line nested deep under an ignored key: a bad line, skipped with --on-error skip.
    jsonl = os.path.join(tmp, "chats.jsonl")
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})
    with open(jsonl, "w") as f:
        f.write(good + "\n" + '{"meta":' + nested(DEEP) + ',"messages":[]}\n' + good + "\n")
    out = os.path.join(tmp, "prepared")
    r = run("prepare", "--input", jsonl, "--output-dir", out, "--val-split", "0", "--on-error", "skip")
    check(r.returncode == 0 and "skipped    1 line" in r.stdout, f"prepare --on-error skip: {r.returncode} {r.stdout} {r.stderr}")
    check(not [e for e in os.listdir(tmp) if e.startswith(".prepared.tmp-")], "no staging directory left behind")
    r = run("prepare", "--input", jsonl, "--output-dir", os.path.join(tmp, "prepared_fail"), "--val-split", "0")
    check(r.returncode != 0 and "nesting deeper than 64" in r.stderr and len(r.stderr) < 600,
          f"prepare without skip: {r.returncode} {r.stderr[:300]!r}")
    check(not [e for e in os.listdir(tmp) if e.startswith(".prepared_fail.tmp-")], "no staging directory after a failure")
    special = os.path.join(tmp, "special.json")
    with open(special, "w") as f:
        f.write('{"system":' + nested(DEEP) + "}")
    expect(run("prepare", "--input", jsonl, "--output-dir", os.path.join(tmp, "p2"), "--special-tokens", special),
           "deep --special-tokens file", 2, "nesting deeper than 64")

    # --save-state replaces the state file whole (temp file + rename) and leaves no temp file.
    saved = os.path.join(tmp, "saved_state.json")
    for n in ("1", "3"):
        r = run("dump", "--config", config, "--batches", n, "--out", os.path.join(tmp, "d" + n), "--save-state", saved)
        check(r.returncode == 0, f"dump --save-state: {r.stderr}")
    check(json.load(open(saved))["splits"]["train"]["step"] == 3, "the second save replaced the first")
    check(not [e for e in os.listdir(tmp) if e.startswith(".saved_state.json.tmp-")], "no temporary state file left")

    # inherits and datasets: regular files only, never a hang.
    child = os.path.join(tmp, "child.xml")
    with open(child, "w") as f:
        f.write('<training inherits="/dev/zero"><batch_size>2</batch_size></training>')
    expect(run("run", "--config", child, "--batches", "1"), "inherits /dev/zero", 3, "character device")
    fifo_data = os.path.join(tmp, "fifo_data")
    write_episodes(fifo_data)
    os.remove(os.path.join(fifo_data, "dataset_metadata.json"))
    os.mkfifo(os.path.join(fifo_data, "dataset_metadata.json"))
    expect(run("inspect", fifo_data), "FIFO metadata (inspect)", 3, "FIFO")
    os.remove(os.path.join(fifo_data, "dataset_metadata.json"))
    os.remove(os.path.join(fifo_data, "train", "episodes.idx"))
    os.mkfifo(os.path.join(fifo_data, "train", "episodes.idx"))
    fifo_config = os.path.join(tmp, "fifo.xml")
    write_config(fifo_config, fifo_data, batch_size=2, block_size=8, token_dtype="uint16", pad_token_id=0)
    expect(run("run", "--config", fifo_config, "--batches", "1"), "FIFO episodes.idx (run)", 3, "not a regular file")

    # Audit log: a newline in audit_log_dir (&#10; in the XML) stays inside its field.
    audit_config = os.path.join(tmp, "audit.xml")
    with open(audit_config, "w") as f:
        f.write(f"<training><dataset_dir>{data}</dataset_dir><batch_size>2</batch_size><block_size>8</block_size>"
                "<audit_log_dir>logs&#10;2026-01-01T00:00:00.000Z | TRAINING | INFO | action=forged</audit_log_dir>"
                "</training>")
    r = run("run", "--config", audit_config, "--batches", "2", cwd=tmp)
    check(r.returncode == 0, f"run with a newline in audit_log_dir: {r.stderr}")
    log_dir = os.path.join(tmp, "logs\n2026-01-01T00:00:00.000Z | TRAINING | INFO | action=forged")
    lines = [line for name in os.listdir(log_dir) for line in open(os.path.join(log_dir, name))]
    check(lines and all(line[24:].startswith(" | TRAINING | INFO | action=") for line in lines)
          and not any("action=forged |" in line for line in lines), f"no forged audit line: {lines[:3]}")

    # Memory: a small config asking for tens of GB of batch buffers is refused up front.
    big = os.path.join(tmp, "big.xml")
    write_config(big, data, batch_size=64, block_size=4096, prefetch_depth=4096, epoch_drop_last=False)
    expect(run("run", "--config", big, "--batches", "1"), "prefetch_depth 4096 at 64x4096", 2, "max_memory_mb")

    # A third-party exception is an Error: SentencePiece's trie builder reads a piece holding
    # one NUL byte as a zero-length C string and throws.
    model = os.path.join(tmp, "empty_piece.model")
    with open(model, "wb") as f:
        f.write(sentencepiece_piece(b"<unk>", 2) + sentencepiece_piece(b"\0", 1))
    expect(run("prepare", "--input", jsonl, "--output-dir", os.path.join(tmp, "p3"), "--tokenizer",
               "sentencepiece:" + model), "SentencePiece model with a NUL piece", 4, "empty_piece.model", "zero-length key")

    # A symbolic link loop is tokenfeed's error naming its path (exit status 3), not the C++
    # library's "filesystem error: status: ..." (exit status 1): in a dataset the loader,
    # inspect and dump read, and where prepare and prepare-text write.
    loop_data = os.path.join(tmp, "loop_data")
    write_episodes(loop_data)
    os.symlink("loop", os.path.join(loop_data, "train", "loop"))
    loop_config = os.path.join(tmp, "loop.xml")
    write_config(loop_config, loop_data, batch_size=2, block_size=8, token_dtype="uint16", pad_token_id=0)
    for what, args in (("inspect", ("inspect", loop_data)), ("inspect --deep", ("inspect", "--deep", loop_data)),
                       ("run", ("run", "--config", loop_config, "--batches", "1"))):
        expect(run(*args), f"symbolic link loop in a dataset ({what})", 3, "cannot access '", "loop'",
               "Too many levels of symbolic links")
    os.symlink("out_loop", os.path.join(tmp, "out_loop"))
    expect(run("prepare", "--input", jsonl, "--output-dir", os.path.join(tmp, "out_loop", "p")),
           "prepare into a symbolic link loop", 3, "out_loop")
    text = os.path.join(tmp, "t.jsonl")
    with open(text, "w") as f:
        f.write('{"text": "hello"}\n')
    expect(run("prepare-text", text, "--output-dir", os.path.join(tmp, "out_loop", "p")),
           "prepare-text into a symbolic link loop", 3, "out_loop")

    # A pattern or path that matches no file is exit status 3, whether its directory exists.
    for pattern in ("none*.jsonl", "none.jsonl", os.path.join("no_dir", "*.jsonl"), os.path.join("no_dir", "c.jsonl")):
        expect(run("prepare-text", os.path.join(tmp, pattern), "--output-dir", os.path.join(tmp, "pt")),
               f"prepare-text {pattern}", 3, "matches no file")

finish("hostile_cli_test")
