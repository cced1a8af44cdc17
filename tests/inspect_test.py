#!/usr/bin/env python3
"""End-to-end checks of `tokenfeed inspect` against what the loader really does, and of the
content line of `tokenfeed run`:

- docs/cli.md's nanoGPT example: inspect --print-config on a plain train.bin/val.bin, the
  snippet written to a config and dumped; the block size chosen without --block-size;
- inspect --packed reproduces what a sft_packed run with the same truncation, seed and
  lookahead packs (checked against the dump's segments), and its usage errors;
- inspect --packed --truncation split reports the documents cut and the padding, as a
  run with truncation=split packs them;
- shard_NNNNN.docs.npy beside token-stream shards: counted as documents, never as a shard,
  and refused when invalid;
- Megatron NAME.bin + NAME.idx pairs: reported with the .idx's dtype and documents, the
  snippet loads, a damaged index is refused naming it;
- verdicts agree with the loader: a split it refuses, or a dataset without train, fails;
- --print-config's pad id follows the loader's precedence (pad_token_id, eot, eos);
- --deep: all-zero masks judged on the label positions mask[1:n], listed by id, and the
  first out-of-vocabulary token located by file, offset and episode; uint8 mask values
  outside {0, 1}, negative float32 weights (NaN/inf: refused by the loader), and the
  recorded content checksums;
- `run` reports trained positions from the loss weights in every mode.

Usage: inspect_test.py PATH/TO/tokenfeed   (standard library only; run by ctest)"""
import json
import os
import re
import struct
import tempfile

from cli_support import check, finish, npy_values, run, write_config


def write_npy(path, values, descr="<u2"):
    """A 1-D .npy file of uint16 (tokens) or uint64 ('<u8': document offsets) values."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, len(values))
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack(f"<{len(values)}{'Q' if descr == '<u8' else 'H'}", *values))


def write_episodes(root, split, shards, with_mask=True):
    """shards: a list of shards, each a list of (tokens, mask) episodes (uint16 / uint8)."""
    for s, episodes in enumerate(shards):
        d = os.path.join(root, split, f"shard_{s:05d}")
        os.makedirs(d)
        tokens, mask, index = bytearray(), bytearray(), bytearray()
        for ep_tokens, ep_mask in episodes:
            index += struct.pack("<QQ", len(tokens) // 2, len(ep_tokens))
            tokens += struct.pack(f"<{len(ep_tokens)}H", *ep_tokens)
            mask += bytes(ep_mask)
        for name, content in (("tokens.bin", tokens), ("episodes.idx", index)) + ((("mask.bin", mask),) if with_mask else ()):
            with open(os.path.join(d, name), "wb") as f:
                f.write(content)


def snippet(stdout):
    """The <training> element of --print-config, as docs/cli.md's `sed -n '/^<training>/,/^<\\/training>/p'` keeps it."""
    lines, inside = [], False
    for line in stdout.splitlines():
        inside = inside or line.startswith("<training>")
        if inside:
            lines.append(line)
        if line.startswith("</training>"):
            break
    return "\n".join(lines) + "\n" if lines else ""


def expect_usage_error(result, what, *needles, status=2):
    lines = result.stderr.strip().splitlines()
    check(result.returncode == status, f"{what}: exit status {result.returncode}, expected {status}: {result.stderr!r}")
    check(len(lines) == 1, f"{what}: expected one line on stderr, got {lines!r}")
    for needle in needles:
        check(needle in result.stderr, f"{what}: stderr should name {needle!r}: {result.stderr!r}")


def stream_tokens(n, seed):
    """n uint16 tokens with an end-of-text 0 every 5..40 tokens."""
    out, state = [], seed
    while len(out) < n:
        state = (state * 1103515245 + 12345) % 2**31
        out += [1 + (state >> 8) % 400 for _ in range(5 + state % 36)] + [0]
    return out[:n]


def test_nanogpt_example(tmp):
    data = os.path.join(tmp, "owt")
    os.makedirs(data)
    train, val = stream_tokens(5000, 1), stream_tokens(1000, 2)
    for name, tokens in (("train.bin", train), ("val.bin", val)):
        with open(os.path.join(data, name), "wb") as f:
            f.write(struct.pack(f"<{len(tokens)}H", *tokens))

    # No metadata and no --token-dtype: a usage error that says what to pass.
    r = run("inspect", data, "--block-size", "16", "--eos-id", "0", "--print-config")
    expect_usage_error(r, "inspect .bin without a dtype", "train.bin", "--token-dtype")
    check(r.stdout == "", f"nothing is reported before the usage error: {r.stdout!r}")

    # docs/cli.md: inspect --print-config | keep the <training> element > owt.xml; dump it.
    r = run("inspect", data, "--block-size", "16", "--eos-id", "0", "--token-dtype", "uint16", "--print-config")
    check(r.returncode == 0, f"inspect --token-dtype: {r.stderr}")
    for needle in ("file         train.bin: 5000 tokens, uint16 (from --token-dtype)", "verdict      ok"):
        check(needle in r.stdout, f"nanoGPT inspect lacks {needle!r}: {r.stdout}")
    xml = snippet(r.stdout)
    for needle in ("<dataset_mode>token_stream</dataset_mode>", "<block_size>16</block_size>",
                   "<document_aware>true</document_aware>", "<eos_token_id>0</eos_token_id>",
                   "<token_dtype>uint16</token_dtype>"):
        check(needle in xml, f"nanoGPT snippet lacks {needle!r}: {xml}")
    config = os.path.join(tmp, "owt.xml")
    with open(config, "w") as f:
        f.write(xml)
    out = os.path.join(tmp, "owt_batches")
    r = run("dump", "--config", config, "--batches", "4", "--out", out, cwd=tmp)
    check(r.returncode == 0, f"dump of the inspect snippet: {r.stderr}")
    if r.returncode == 0:
        _, shape, x = npy_values(os.path.join(out, "x.npy"))
        _, _, starts = npy_values(os.path.join(out, "window_ids.npy"))
        check(shape == (32, 16), f"snippet batches are 8 x 16: {shape}")
        for row, start in enumerate(starts):
            check(list(x[row * 16:(row + 1) * 16]) == train[start:start + 16], f"snippet row {row} is its window")

    # A dtype the metadata contradicts is refused, as the loader refuses it.
    with open(os.path.join(data, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16"}, f)
    expect_usage_error(run("inspect", data, "--token-dtype", "uint32"), "--token-dtype against the metadata",
                       "--token-dtype is uint32", "uint16")
    r = run("inspect", data, "--print-config")
    check(r.returncode == 0 and "<token_dtype>" not in snippet(r.stdout),
          f"no <token_dtype> line when the metadata records it: {r.stdout}")
    os.remove(os.path.join(data, "dataset_metadata.json"))

    # Without --block-size: val's 1000 tokens hold no 1025-token window, so the snippet picks
    # the largest power of two giving every split 8 whole windows (64: 1000 // 65 = 15,
    # 1000 // 129 = 7), says so, and loads.
    r = run("inspect", data, "--token-dtype", "uint16", "--print-config")
    xml = snippet(r.stdout)
    check(r.returncode == 0 and "<block_size>64</block_size>" in xml and "no --block-size given" in xml,
          f"block size chosen to fit: {xml}")
    with open(config, "w") as f:
        f.write(xml)
    r = run("dump", "--config", config, "--split", "val", "--batches", "1", "--out", os.path.join(tmp, "owt_val"), cwd=tmp)
    check(r.returncode == 0, f"dump of the chosen block size (val): {r.stderr}")
    # A block size that leaves val without a window is the loader's refusal, not "ok".
    r = run("inspect", data, "--token-dtype", "uint16", "--block-size", "1024", "--print-config")
    check(r.returncode == 4 and "INVALID: no file holds one window of block_size + 1 = 1025" in r.stdout,
          f"val at block 1024 is refused: {r.returncode} {r.stdout}")
    check("<training>" not in r.stdout, "no snippet for a block size the loader refuses")
    # The loader opens (train has windows) and refuses val only when it is used.
    write_config(config, data, batch_size=2, block_size=1024, token_dtype="uint16")
    check(run("dump", "--config", config, "--out", os.path.join(tmp, "x")).returncode == 0,
          "train dumps although val has no window at block 1024")
    check(run("dump", "--config", config, "--split", "val", "--out", os.path.join(tmp, "y")).returncode == 4,
          "the loader refuses val at block 1024 when it is used")

    # .npy shards carry their dtype: no --token-dtype needed, no <token_dtype> line.
    npy = os.path.join(tmp, "npy")
    os.makedirs(os.path.join(npy, "train"))
    long_stream = stream_tokens(20000, 3)  # 9 whole 1025-token windows in each file
    write_npy(os.path.join(npy, "train", "part_0.npy"), long_stream[:10000])
    write_npy(os.path.join(npy, "train", "part_1.npy"), long_stream[10000:])
    r = run("inspect", npy, "--print-config")
    xml = snippet(r.stdout)
    check(r.returncode == 0 and "(from its .npy header)" in r.stdout and "<token_dtype>" not in xml
          and "<block_size>1024</block_size>  <!-- assumed" in xml, f".npy shards: {r.stdout}")


def chat_episode(exchanges, filler):
    """[SYS x EOT] then `exchanges` of [USR . . EOT][AST . . . EOT], masked on the assistant."""
    SYS, USR, AST, EOT = 90, 91, 92, 94
    tokens, mask = [SYS, filler, EOT], [0, 0, 0]
    for k in range(exchanges):
        tokens += [USR, filler, k + 1, EOT, AST, filler, k + 2, k + 3, EOT]
        mask += [0, 0, 0, 0, 0, 1, 1, 1, 1]
    return tokens, mask


def check_run_packs(tmp, data, what, rows, positions, episodes, **keys):
    """The sft_packed run with `keys` at batch_size 1 and no drop_last, whose epoch 0 is then
    exactly `rows` batches: every episode once, `positions` real positions (inspect's figures)."""
    config = os.path.join(tmp, "packed.xml")
    write_config(config, data, dataset_mode="sft_packed", batch_size=1, use_loss_mask="true", epoch_drop_last="false",
                 **keys)
    out = os.path.join(tmp, "packed_" + "_".join(f"{k}{v}" for k, v in keys.items()))
    d = run("dump", "--config", config, "--batches", str(rows), "--out", out)
    check(d.returncode == 0, f"{what}: dump: {d.stderr}")
    if d.returncode != 0:
        return
    _, shape, seg = npy_values(os.path.join(out, "segments.npy"))
    segments = [seg[5 * k:5 * k + 5] for k in range(shape[0])]
    check(sorted(s[4] for s in segments) == list(range(episodes)),
          f"{what}: {rows} batches are exactly epoch 0 (every episode once)")
    check(sum(s[3] for s in segments) == positions, f"{what}: the run packs {positions} real positions")


def test_packed(tmp):
    data = os.path.join(tmp, "chat")
    episodes = [chat_episode(1 + (e * 7) % 6, 100 + e) for e in range(90)] + [([5, 6], [0, 1])] * 30
    write_episodes(data, "train", [episodes])
    with open(os.path.join(data, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 94,
                   "special_tokens": {"system": 90, "user": 91, "assistant": 92, "tool": 93, "eot": 94}}, f)
    T = 24
    packing = re.compile(r"packing      sft_packed: (\d+) rows, (\d+) of (\d+) positions real")
    rows_by_setting, positions_by_truncation = {}, {}
    for truncation in ("right", "drop_oldest_turns"):
        for lookahead in (2, 64):
            for seed in (1, 2, 3, 1337):
                what = f"--packed truncation={truncation} lookahead={lookahead} seed={seed}"
                r = run("inspect", data, "--block-size", str(T), "--packed", "--truncation", truncation,
                        "--pack-lookahead", str(lookahead), "--seed", str(seed))
                m = packing.search(r.stdout)
                check(r.returncode == 0 and m is not None, f"{what}: {r.returncode} {r.stdout} {r.stderr}")
                if not m:
                    continue
                rows, positions = int(m.group(1)), int(m.group(2))
                check(f"assumed: truncation={truncation}, epoch_seed={seed} (epoch 0's order), "
                      f"pack_lookahead={lookahead}, episode_min_tokens=2" in r.stdout, f"{what}: assumptions: {r.stdout}")
                rows_by_setting[(truncation, lookahead, seed)] = rows
                positions_by_truncation.setdefault(truncation, set()).add(positions)
                check_run_packs(tmp, data, what, rows, positions, len(episodes), block_size=T, truncation=truncation,
                                pack_lookahead=lookahead, epoch_seed=seed)
    # Context parallelism pads each episode to a multiple of 2·cp: the report packs as such a
    # run does (a world of cp ranks, one data-parallel group), more rows for the same positions.
    for cp in (2, 3):
        what = f"--packed --context-parallel-size {cp}"
        r = run("inspect", data, "--block-size", str(T), "--packed", "--context-parallel-size", str(cp))
        m = packing.search(r.stdout)
        check(r.returncode == 0 and m is not None, f"{what}: {r.returncode} {r.stdout} {r.stderr}")
        if not m:
            continue
        rows, positions = int(m.group(1)), int(m.group(2))
        check(f"context_parallel_size={cp} (each episode padded to a multiple of {2 * cp})" in r.stdout,
              f"{what}: assumptions: {r.stdout}")
        check(rows > rows_by_setting[("right", 64, 1337)], f"{what}: the padding takes room: {rows} rows")
        check_run_packs(tmp, data, what, rows, positions, len(episodes), block_size=T, context_parallel_size=cp,
                        world_size=cp, rank=0)
    expect_usage_error(run("inspect", data, "--block-size", "22", "--packed", "--context-parallel-size", "2"),
                       "--context-parallel-size 2 at block size 22", "multiple of 4")

    # The settings matter, so a report that ignored them could not match every run above.
    check(len({tuple(v) for v in positions_by_truncation.values()}) == 2,
          f"the truncation rules keep different positions: {positions_by_truncation}")
    check(len({rows_by_setting[("right", 2, s)] for s in (1, 2, 3, 1337)}) > 1,
          f"the seed changes the packing at lookahead 2: {rows_by_setting}")

    # The snippet for --packed is the run the figure describes, and it loads.
    r = run("inspect", data, "--block-size", str(T), "--packed", "--truncation", "drop_oldest_turns", "--seed", "7",
            "--print-config")
    xml = snippet(r.stdout)
    for needle in ("<dataset_mode>sft_packed</dataset_mode>", "<truncation>drop_oldest_turns</truncation>",
                   "<epoch_seed>7</epoch_seed>", "<pack_lookahead>64</pack_lookahead>", f"<block_size>{T}</block_size>"):
        check(needle in xml, f"--packed snippet lacks {needle!r}: {xml}")
    config = os.path.join(tmp, "packed_snippet.xml")
    with open(config, "w") as f:
        f.write(xml)
    check(run("dump", "--config", config, "--batches", "2", "--out", os.path.join(tmp, "ps"), cwd=tmp).returncode == 0,
          "the --packed snippet loads")

    # Options that would be silently ignored are usage errors (exit 2).
    expect_usage_error(run("inspect", data, "--packed"), "--packed without --block-size", "--block-size")
    for option in (("--seed", "3"), ("--truncation", "drop_oldest_turns"), ("--pack-lookahead", "8"),
                   ("--context-parallel-size", "2")):
        expect_usage_error(run("inspect", data, "--block-size", "8", *option), f"{option[0]} without --packed", "--packed")
    stream = os.path.join(tmp, "owt")
    expect_usage_error(run("inspect", stream, "--token-dtype", "uint16", "--block-size", "8", "--packed"),
                       "--packed on a token stream", "token stream")
    plain = os.path.join(tmp, "plain")
    write_episodes(plain, "train", [episodes[:20]])
    with open(os.path.join(plain, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 94}, f)
    expect_usage_error(run("inspect", plain, "--block-size", "8", "--packed", "--truncation", "drop_oldest_turns"),
                       "drop_oldest_turns without special_tokens", "special_tokens")


def test_packed_split(tmp):
    # Pretraining documents as episodes without masks (prepare-text --format episodes).
    data = os.path.join(tmp, "documents")
    lengths = [2 + (d * 37) % 41 for d in range(50)]
    write_episodes(data, "train", [[([1 + (d + p) % 300 for p in range(n)], [1] * n) for d, n in enumerate(lengths)]],
                   with_mask=False)
    with open(os.path.join(data, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0}, f)
    T = 8
    pieces = sum((n - 2) // T + 1 for n in lengths)
    cut = sum(1 for n in lengths if n > T + 1)
    r = run("inspect", data, "--block-size", str(T), "--packed", "--truncation", "split")
    m = re.search(r"split        (\d+) of (\d+) documents cut \(([\d.]+)%\) into (\d+) pieces; "
                  r"padding (\d+) of (\d+) packed positions \(([\d.]+)%\)", r.stdout)
    rows = re.search(r"packing      sft_packed: (\d+) rows", r.stdout)
    check(r.returncode == 0 and m is not None and rows is not None, f"--truncation split: {r.returncode} {r.stdout} {r.stderr}")
    if not (m and rows):
        return
    check((int(m.group(1)), int(m.group(2)), int(m.group(4))) == (cut, len(lengths), pieces),
          f"split: {cut} of {len(lengths)} documents cut into {pieces} pieces: {m.group(0)}")
    check(m.group(3) == f"{100 * cut / len(lengths):.1f}", f"split: the fraction cut: {m.group(0)}")
    # The run: every label position of every document trained, in `rows` rows of T.
    cells = int(rows.group(1)) * T
    check((int(m.group(5)), int(m.group(6))) == (cells - sum(n - 1 for n in lengths), cells),
          f"split: the padding is what the pieces leave of {cells} positions: {m.group(0)}")
    config = os.path.join(tmp, "split.xml")
    write_config(config, data, dataset_mode="sft_packed", batch_size=1, block_size=T, epoch_drop_last="false",
                 truncation="split")
    out = os.path.join(tmp, "split_dump")
    d = run("dump", "--config", config, "--batches", rows.group(1), "--out", out)
    check(d.returncode == 0, f"split: dump: {d.stderr}")
    if d.returncode == 0:
        _, shape, seg = npy_values(os.path.join(out, "segments.npy"))
        check(shape[0] == pieces and sum(seg[5 * k + 3] for k in range(shape[0])) == sum(n - 1 for n in lengths),
              f"split: the run packs {pieces} pieces holding every label position")


def test_stream_documents(tmp):
    root = os.path.join(tmp, "pretrain")
    os.makedirs(os.path.join(root, "train"))
    tokens = stream_tokens(3000, 5)
    write_npy(os.path.join(root, "train", "shard_00000.npy"), tokens[:2000])
    write_npy(os.path.join(root, "train", "shard_00001.npy"), tokens[2000:])
    write_npy(os.path.join(root, "train", "shard_00000.docs.npy"), [0, 100, 700, 1999], "<u8")
    write_npy(os.path.join(root, "train", "shard_00001.docs.npy"), [0, 10], "<u8")
    r = run("inspect", root, "--block-size", "64")
    check(r.returncode == 0 and "2 files" in r.stdout and "shard_00000.npy: 2000 tokens" in r.stdout
          and "4 documents (shard_00000.docs.npy)" in r.stdout
          and "docs.npy     6 documents, offsets beside 2 of 2 files" in r.stdout and "docs.npy:" not in r.stdout, f"docs.npy beside shards: {r.returncode} {r.stdout} {r.stderr}")
    write_npy(os.path.join(root, "train", "shard_00001.docs.npy"), [0, 1000], "<u8")
    r = run("inspect", root)
    check(r.returncode != 0 and "shard_00001.docs.npy" in r.stdout + r.stderr,
          f"an offset past its shard is refused, naming the file: {r.returncode} {r.stdout} {r.stderr}")


def write_megatron(prefix, documents):
    """NAME.bin + NAME.idx in Megatron-LM's MMIDIDX layout, one sequence per document (uint16,
    dtype code 8); written from the published format, megatron-core not being installable
    offline."""
    lengths = [len(d) for d in documents]
    pointers = [2 * sum(lengths[:i]) for i in range(len(lengths))]
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lengths), len(lengths) + 1))
        f.write(struct.pack(f"<{len(lengths)}i{len(lengths)}q{len(lengths) + 1}q", *lengths, *pointers,
                            *range(len(lengths) + 1)))
    with open(prefix + ".bin", "wb") as f:
        f.write(b"".join(struct.pack(f"<{len(d)}H", *d) for d in documents))


def test_megatron(tmp):
    root = os.path.join(tmp, "megatron")
    os.makedirs(os.path.join(root, "train"))
    tokens = stream_tokens(3000, 7)
    write_megatron(os.path.join(root, "train", "a"), [tokens[i:i + 100] for i in range(0, 2000, 100)])
    write_megatron(os.path.join(root, "train", "b"), [tokens[2000:2400], tokens[2400:3000]])
    r = run("inspect", root, "--block-size", "8", "--print-config")
    check(r.returncode == 0 and "a.bin: 2000 tokens, uint16 (from its Megatron .idx), 20 documents (a.idx)" in r.stdout
          and "indexed      22 documents, in the .idx or .ds.index of 2 of 2 files" in r.stdout and "verdict      ok" in r.stdout,
          f"megatron pairs: {r.returncode} {r.stdout} {r.stderr}")
    config = os.path.join(root, "snippet.xml")
    with open(config, "w") as f:
        f.write(snippet(r.stdout))
    d = run("dump", "--config", config, "--out", os.path.join(tmp, "megatron_dump"), "--batches", "1")
    check(d.returncode == 0, f"megatron: the snippet loads without a token_dtype: {d.stderr}")
    # val_fraction: each split's documents of the files; the snippet (token stream, then
    # --packed's sft_packed over the documents as episodes) loads both splits.
    r = run("inspect", root, "--block-size", "8", "--val-fraction", "0.3", "--val-seed", "1", "--print-config")
    counts = [int(n) for n in re.findall(r"val_fraction 0.3 \(val_seed 1\): this split is (\d+) documents", r.stdout)]
    check(r.returncode == 0 and len(counts) == 2 and sum(counts) == 22 and min(counts) > 0
          and "<val_fraction>0.3</val_fraction>" in r.stdout, f"megatron --val-fraction: {r.returncode} {r.stdout} {r.stderr}")
    for packed in ([], ["--packed"]):
        r = run("inspect", root, "--block-size", "8", "--val-fraction", "0.3", "--val-seed", "1", *packed,
                "--print-config")
        check(r.returncode == 0 and (not packed or r.stdout.count("packing      sft_packed:") == 2),
              f"megatron --val-fraction {packed}: {r.returncode} {r.stdout} {r.stderr}")
        with open(config, "w") as f:
            f.write(snippet(r.stdout))
        # (--packed's snippet fits its batch to train's rows; val's 6 documents pack into fewer.)
        for split in ("train", "val")[:2 - len(packed)]:
            d = run("dump", "--config", config, "--split", split, "--out", os.path.join(tmp, "megatron_val_dump"),
                    "--batches", "1")
            check(d.returncode == 0, f"megatron --val-fraction {packed}: the snippet loads {split}: {d.stderr}")
    with open(os.path.join(root, "train", "b.idx"), "ab") as f:
        f.write(b"\x00")
    r = run("inspect", root)
    check(r.returncode != 0 and "b.idx" in r.stdout + r.stderr and "does not match its header" in r.stdout + r.stderr,
          f"a damaged index is refused, naming it: {r.returncode} {r.stdout} {r.stderr}")


def test_verdicts(tmp):
    meta = {"token_dtype": "uint16", "eot_token_id": 0}
    config = os.path.join(tmp, "verdict.xml")

    def dataset(name, splits):
        root = os.path.join(tmp, name)
        for split, episodes in splits.items():
            write_episodes(root, split, [episodes])
        os.makedirs(root, exist_ok=True)
        with open(os.path.join(root, "dataset_metadata.json"), "w") as f:
            json.dump(meta, f)
        return root

    good = [([1, 2, 3, 4], [0, 1, 1, 1])] * 10
    for name, splits, status, needle in (
            ("empty", {"train": []}, 4, "no episode left after filtering: none of its 0 episodes"),
            ("one_token", {"train": [([7], [1])] * 5}, 4, "none of its 5 episodes has >= 2 tokens"),
            ("empty_val", {"train": good, "val": []}, 4, "none of its 0 episodes"),
            ("no_train", {"val": good}, 3, "no train split")):
        root = dataset(name, splits)
        r = run("inspect", root, "--print-config")
        check(r.returncode == status, f"{name}: inspect exits {r.returncode}, expected {status}: {r.stdout} {r.stderr}")
        check("INVALID" in r.stdout and needle in r.stdout, f"{name}: verdict: {r.stdout}")
        check("<training>" not in r.stdout, f"{name}: no snippet for a dataset the loader refuses")
        check(len(r.stderr.strip().splitlines()) == 1, f"{name}: one error line: {r.stderr!r}")
        # The loader agrees: it refuses the same dataset.
        write_config(config, root, batch_size=1, block_size=8)
        check(run("dump", "--config", config, "--out", os.path.join(tmp, "v")).returncode != 0,
              f"{name}: the loader refuses it too")
    root = dataset("fine", {"train": good, "val": good[:3]})
    r = run("inspect", root)
    check(r.returncode == 0 and r.stdout.count("verdict      ok") == 2, f"a loadable dataset is ok: {r.stdout}")
    # Fewer kept episodes than the snippet's batch: the snippet shrinks its batch to load.
    r = run("inspect", root, "--print-config", "--block-size", "8")
    xml = snippet(r.stdout)
    check("<batch_size>8</batch_size>" in xml, f"10 kept episodes fit a batch of 8: {xml}")
    small = dataset("small", {"train": good[:3]})
    xml = snippet(run("inspect", small, "--print-config").stdout)
    check("<batch_size>3</batch_size>" in xml and "<!-- assumed" in xml, f"3 kept episodes: batch 3: {xml}")
    with open(config, "w") as f:
        f.write(xml)
    check(run("dump", "--config", config, "--out", os.path.join(tmp, "s"), cwd=tmp).returncode == 0,
          "the small dataset's snippet loads")


def test_deep(tmp):
    root = os.path.join(tmp, "deep")
    # Episodes 3 and 7 train on nothing although mask[0] is 1 (mask[0] aligns with no
    # label); episode 5 is all zero; episode 9 trains on its last token only.
    shard0 = [([1, 2, 3, 4, 5], [0, 1, 0, 1, 1]) for _ in range(10)]
    for e in (3, 7):
        shard0[e] = ([1, 2, 3, 4, 5], [1, 0, 0, 0, 0])
    shard0[5] = ([1, 2, 3], [0, 0, 0])
    shard0[9] = ([1, 2, 3], [0, 0, 1])
    shard1 = [([10, 11, 12], [0, 1, 1]), ([20, 21, 60000, 23], [0, 1, 1, 1]), ([1], [1])]
    write_episodes(root, "train", [shard0, shard1])
    with open(os.path.join(root, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0, "vocab_size": 50000}, f)
    r = run("inspect", root, "--deep")
    check(r.returncode == 4, f"--deep with a bad id exits 4: {r.returncode}")
    check("3 of 12 kept episodes with an all-zero mask on their labels, mask[1:n]" in r.stdout
          and "episode ids 3, 5, 7\n" in r.stdout, f"all-zero masks on mask[1:n], by id: {r.stdout}")
    where = os.path.join(root, "train", "shard_00001", "tokens.bin")
    check(f"1 tokens >= vocab_size 50000 (first: token 60000 at token offset 5 of '{where}', episode 11 position 2)"
          in r.stdout, f"the bad id is located by shard, offset and episode: {r.stdout}")


def sha256_of(path):
    import hashlib
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_deep_corruption(tmp):
    """--deep reports uint8 mask values outside {0, 1} and negative float32 weights with the
    first offending episode; the loader refuses NaN/inf float32 weights; recorded content
    checksums are verified shard by shard."""
    root = os.path.join(tmp, "corrupt_mask")
    episodes = [([1, 2, 3, 4], [0, 1, 1, 1]) for _ in range(6)]
    episodes[4] = ([1, 2, 3, 4], [0, 1, 7, 1])  # a flipped bit
    write_episodes(root, "train", [episodes])
    with open(os.path.join(root, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0}, f)
    r = run("inspect", root, "--deep")
    check(r.returncode == 4, f"--deep with a uint8 mask value 7 exits 4: {r.returncode} {r.stdout}")
    mask_file = os.path.join(root, "train", "shard_00000", "mask.bin")
    check(f"1 mask values outside {{0, 1}} (read as 1) (first: 7 at value offset 18 of '{mask_file}', "
          f"episode 4 position 2)" in r.stdout, f"the uint8 value is located: {r.stdout}")
    check("INVALID: mask values out of range" in r.stdout, f"verdict: {r.stdout}")
    check(run("inspect", root).returncode == 0, "without --deep the uint8 value passes (the loader reads it as 1)")

    # float32 weights: a negative one is a --deep finding; NaN is refused by the loader itself.
    for value, status, needle in ((-0.5, 4, "1 mask values negative (first: -0.5 at value offset 9"),
                                  (float("nan"), 4, "float32 mask value is NaN or infinite (first: nan at value offset 9")):
        with open(mask_file, "wb") as f:
            weights = [1.0] * 24
            weights[9] = value
            f.write(struct.pack("<24f", *weights))
        with open(os.path.join(root, "dataset_metadata.json"), "w") as f:
            json.dump({"token_dtype": "uint16", "mask_dtype": "float32", "eot_token_id": 0}, f)
        r = run("inspect", root, "--deep")
        check(r.returncode == status and needle in r.stdout + r.stderr and "episode 2 position 1" in r.stdout + r.stderr,
              f"float32 {value}: exit {r.returncode}, {r.stdout} {r.stderr}")

    # Content checksums: recorded, verified, and a changed byte is caught.
    root = os.path.join(tmp, "checksums")
    write_episodes(root, "train", [[([1, 2, 3], [0, 1, 1])] * 4, [([5, 6], [1, 1])] * 3])
    sums = {}
    for shard in ("shard_00000", "shard_00001"):
        d = os.path.join(root, "train", shard)
        sums[f"train/{shard}"] = {name: sha256_of(os.path.join(d, name)) for name in ("episodes.idx", "tokens.bin", "mask.bin")}
    with open(os.path.join(root, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0, "content_sha256": sums}, f)
    r = run("inspect", root, "--deep")
    check(r.returncode == 0 and "content checksums ok (2 shards, sha256)" in r.stdout, f"checksums verified: {r.stdout}")
    tokens = os.path.join(root, "train", "shard_00001", "tokens.bin")
    with open(tokens, "r+b") as f:
        f.seek(2)
        f.write(b"\x07")
    r = run("inspect", root, "--deep")
    check(r.returncode == 4 and "train/shard_00001/tokens.bin differs" in r.stdout
          and "INVALID: content checksum mismatch" in r.stdout, f"a changed byte is caught: {r.returncode} {r.stdout}")
    check(run("inspect", root).returncode == 0, "checksums are verified by --deep only")


def test_run_trained_positions(tmp):
    trained = re.compile(r"content   (\d+) real positions \([\d.]+%\), (\d+) trained positions")

    def content(config, batches):
        r = run("run", "--config", config, "--batches", str(batches))
        m = trained.search(r.stdout)
        check(r.returncode == 0 and m is not None, f"run {config}: {r.stdout} {r.stderr}")
        return (int(m.group(1)), int(m.group(2))) if m else (-1, -1)

    config = os.path.join(tmp, "run.xml")
    # Token streams: every position is real; trained unless the label crosses a document.
    data = os.path.join(tmp, "run_stream")
    os.makedirs(data)
    tokens = stream_tokens(3000, 5)
    with open(os.path.join(data, "train.bin"), "wb") as f:
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
    B, T = 4, 16
    windows = len(tokens) // (T + 1)
    for contract in ("true", "false"):
        write_config(config, data, batch_size=B, block_size=T, token_dtype="uint16", contract_fields=contract)
        check(content(config, 10) == (10 * B * T, 10 * B * T), f"plain token stream, contract_fields={contract}")
        # One shuffled epoch of document-aware windows: each end-of-text input loses its label.
        write_config(config, data, batch_size=B, block_size=T, token_dtype="uint16", contract_fields=contract,
                     document_aware="true", eos_token_id=0, batch_sampling_mode="epoch")
        used = windows // B * B
        eos_inputs = sum(tokens[w * (T + 1):w * (T + 1) + T].count(0) for w in range(windows))
        real, got = content(config, windows // B)
        check(real == used * T and eos_inputs > 0, f"document-aware: {real} real positions")
        if used == windows:
            check(got == used * T - eos_inputs, f"document-aware, contract_fields={contract}: {got} trained")
        else:
            check(used * T - eos_inputs <= got < used * T, f"document-aware, contract_fields={contract}: {got} trained")
    # sft_episode over exactly one epoch (no shuffle): real = min(n - 1, T) per episode;
    # trained = that without the mask, the mask's ones on those labels with it.
    data = os.path.join(tmp, "run_sft")
    episodes = [([1000 + p for p in range(3 + (e * 5) % 30)], [(p * e) % 3 == 0 for p in range(3 + (e * 5) % 30)])
                for e in range(24)]
    episodes = [(t, [int(v) for v in m]) for t, m in episodes]
    write_episodes(data, "train", [episodes])
    with open(os.path.join(data, "dataset_metadata.json"), "w") as f:
        json.dump({"token_dtype": "uint16", "eot_token_id": 0}, f)
    real = sum(min(len(t) - 1, T) for t, _ in episodes)
    masked = sum(sum(m[1:min(len(t), T + 1)]) for t, m in episodes)
    for mask in ("false", "true"):
        for contract in ("true", "false"):
            write_config(config, data, batch_size=B, block_size=T, use_loss_mask=mask, contract_fields=contract,
                         epoch_shuffle="false")
            expected = (real, masked if mask == "true" else real)
            check(content(config, len(episodes) // B) == expected,
                  f"sft_episode mask={mask} contract_fields={contract}: expected {expected}")
    # sft_packed without the mask trains on every real position.
    write_config(config, data, dataset_mode="sft_packed", batch_size=2, block_size=T, use_loss_mask="false")
    got = content(config, 3)
    check(got[0] > 0 and got[0] == got[1], f"sft_packed without the mask: {got}")


def test_print_config_pad_id(tmp):
    # The snippet's pad id follows the loader's precedence: the metadata's pad_token_id, then
    # eot_token_id, then eos_token_id; a pad_token_id line only when the metadata has none.
    episodes = [([1, 2, 3], [0, 1, 1]), ([4, 5, 6, 7, 8], [0, 0, 1, 1, 1])] * 4
    for name, meta, pad in (("pad_only", {"pad_token_id": 5}, 5), ("eos_only", {"eos_token_id": 6}, 6),
                            ("none", {}, 0)):
        root = os.path.join(tmp, "pad_" + name)
        write_episodes(root, "train", [episodes])
        with open(os.path.join(root, "dataset_metadata.json"), "w") as f:
            json.dump(dict(meta, token_dtype="uint16"), f)
        r = run("inspect", root, "--print-config", "--block-size", "8")
        xml = snippet(r.stdout)
        check(r.returncode == 0 and xml, f"{name}: a snippet: {r.stdout} {r.stderr}")
        check(("<pad_token_id>" in xml) == (name == "none"), f"{name}: a pad_token_id line only without one: {xml}")
        # The snippet loads, and the padding holds the loader's pad id.
        config = os.path.join(root, "snippet.xml")
        with open(config, "w") as f:
            f.write(xml)
        out = os.path.join(tmp, "pad_dump_" + name)
        d = run("dump", "--config", config, "--out", out, "--batches", "1")
        check(d.returncode == 0, f"{name}: the snippet loads: {d.stderr}")
        if d.returncode == 0:
            _, _, x = npy_values(os.path.join(out, "x.npy"))
            check(x[7] == pad, f"{name}: the padding is {pad}: {x[:16]}")


with tempfile.TemporaryDirectory() as tmp:
    test_nanogpt_example(tmp)
    test_packed(tmp)
    test_packed_split(tmp)
    test_stream_documents(tmp)
    test_megatron(tmp)
    test_verdicts(tmp)
    test_deep(tmp)
    test_deep_corruption(tmp)
    test_run_trained_positions(tmp)
    test_print_config_pad_id(tmp)

finish("inspect_test")
