"""The installed wheel's smoke suite (ci/wheel_test.sh runs it with the venv's Python, inside
the mount namespace that hides the system's copies of the libraries the wheel bundles).

    python ci/wheel_smoke.py REPO WORK_DIR

Checks, each against the installed package (not the source tree): the module opens the
sample dataset and its batches equal `tokenfeed dump`'s for the same config; `tokenfeed
prepare` of the sample conversations writes the shipped sample dataset again, which the
module opens; `tokenfeed inspect` (and --deep, which hashes every shard with libcrypto)
reads it; the native byte-level BPE (`hf-bpe:`, PCRE2-JIT and utf8proc, both bundled)
encodes with a small tokenizer.json written here, its NFC normalizer and GPT-2 pattern
included (the ids are the tokenizers package's for that file), and `tokenfeed prepare-text
--hf-tokenizer` runs it (no tokenizers package in this venv: --verify-sample says so and the
run is native); the stubs and py.typed are installed; `tokenfeed --version` is the module's
version. The command is run through the console script, which executes the bundled
executable, so both ELF files of the wheel load under the hiding. Exits non-zero on the
first failure."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import tokenfeed

BATCHES = 6


def command(*args):
    """Runs the venv's `tokenfeed` console script; returns its stdout."""
    exe = Path(sys.executable).parent / "tokenfeed"
    done = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit(f"tokenfeed {' '.join(map(str, args))}: exit {done.returncode}\n{done.stderr}")
    return done.stdout


def check(ok, what):
    if not ok:
        sys.exit(f"wheel smoke: FAILED: {what}")
    print(f"ok  {what}")


def byte_level_alphabet():
    """GPT-2's bytes_to_unicode: byte b's character in a byte-level BPE vocabulary."""
    kept = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in kept:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def check_native_bpe(work):
    """hf-bpe: on a tokenizer.json of the 256 bytes (id = byte) and two merges ("Ġ t" 256,
    "h e" 257), NFC, GPT-2's pattern: "the the\u0301" is NFC "the thé", split "the" " thé"."""
    chars = byte_level_alphabet()
    vocab = {c: b for b, c in chars.items()}
    vocab["Ġt"], vocab["he"] = 256, 257
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
            "normalizer": {"type": "NFC"},
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                                                "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": ["Ġ t", "h e"]}}
    directory = work / "native-bpe"
    directory.mkdir()
    (directory / "tokenizer.json").write_text(json.dumps(spec))
    tok = tokenfeed.make_tokenizer(f"hf-bpe:{directory / 'tokenizer.json'}")
    want = [ord("t"), 257, 256, ord("h"), 0xC3, 0xA9]
    got = tok.encode("the the\u0301").tolist()
    check(got == want, f"hf-bpe: (PCRE2-JIT, utf8proc NFC) encodes 'the the\\u0301' as {want}: {got}")
    (work / "native.jsonl").write_text(json.dumps({"text": "the the\u0301"}) + "\n")
    out = command("prepare-text", work / "native.jsonl", "--output-dir", work / "native-out", "--hf-tokenizer",
                  directory, "--no-eos", "--val-split", "0")
    ids = np.load(work / "native-out" / "train" / "shard_00000.npy").tolist()
    check("hf-bpe:" in out and ids == want, f"prepare-text --hf-tokenizer encodes natively: {ids}")


def main():
    repo, work = Path(sys.argv[1]), Path(sys.argv[2])
    package = Path(tokenfeed.__file__).resolve().parent
    check(Path(sys.prefix).resolve() in package.parents, f"tokenfeed imported from the venv ({package})")
    check((package / "_tokenfeed.pyi").is_file() and (package / "py.typed").is_file(), "stubs and py.typed installed")
    check(command("--version").strip() == f"tokenfeed {tokenfeed.__version__}",
          f"tokenfeed --version is the module's {tokenfeed.__version__}")

    tokenfeed.set_logging(False)
    sample = repo / "data/sample/sample.xml"
    command("dump", "--config", sample, "--batches", BATCHES, "--out", work / "dump")
    dumped = {p.stem: np.load(p) for p in (work / "dump").glob("*.npy")}
    with tokenfeed.Loader(sample) as loader:
        got = [{k: v.copy() for k, v in b.arrays().items()} for b in loader.iter("train", steps=BATCHES)]
    for field in ("x", "y", "mask"):
        check(np.array_equal(np.concatenate([b[field] for b in got]), dumped[field]),
              f"{BATCHES} batches of sample.xml: {field} equals tokenfeed dump's")

    prepared = work / "prepared"
    command("prepare", "--input", repo / "data/sample/conversations.jsonl", "--output-dir", prepared,
            "--tokenizer", "bytes", "--val-split", "0.1", "--seed", "0")
    shipped = repo / "data/sample/sft"
    for shard in sorted(shipped.glob("*/shard_*/*")):
        mine = prepared / shard.relative_to(shipped)
        check(mine.is_file() and mine.read_bytes() == shard.read_bytes(),
              f"prepare wrote {shard.relative_to(shipped)} as in data/sample/sft")
    with tokenfeed.Loader({"dataset_dir": str(prepared), "block_size": 256, "batch_size": 4,
                           "use_loss_mask": True, "audit_log_dir": ""}) as loader:
        check(loader.get_batch("train").x.shape == (4, 256), "the module opens the prepared dataset")
    report = command("inspect", prepared)
    check("train" in report and "val" in report, "tokenfeed inspect reads the prepared dataset")
    command("inspect", prepared, "--deep")
    check(True, "tokenfeed inspect --deep verifies its checksums")
    check_native_bpe(work)
    print("wheel smoke: all passed")


if __name__ == "__main__":
    main()
