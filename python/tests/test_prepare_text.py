"""prepare-text from Python and through the command: ids equal to the Hugging Face tokenizer's
own for every document (Unicode, empty, very long), for 1, 2 and 4 workers; parquet giving the
bytes JSONL gives; the command handing --hf-tokenizer and parquet to the package; a run killed
with SIGKILL at several points and resumed onto the bytes of an uninterrupted run; bad input."""
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tokenfeed

pytest.importorskip("tokenizers")

WORDS = ("the loader reads tokens from memory mapped files naïve café 東京 données 🙂 a b c "
         "pretraining corpus documents packed whole into rows").split()


def documents(n, seed=0):
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        if i % 97 == 5:
            docs.append("")  # an empty document
            continue
        count = rng.randint(1, 4000 if i % 500 == 7 else 40)  # a few very long ones
        docs.append(" ".join(rng.choice(WORDS) for _ in range(count)) + ("\n" if i % 11 == 0 else ""))
    return docs


def write_jsonl(path, docs):
    with open(path, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d, "meta": {"n": len(d or "")}}, ensure_ascii=False) + "\n")


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory):
    """A byte-level BPE trained here (about 2k ids) with an end-of-text token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2000, special_tokens=["<|endoftext|>", "<s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(documents(2000, seed=1), trainer)
    d = tmp_path_factory.mktemp("hf")
    tok.save(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>", "bos_token": "<s>"}))
    return d


def read_token_split(split_dir):
    """The documents of a tokens-format split, from its shards and document offsets."""
    docs = []
    for shard in sorted(Path(split_dir).glob("shard_*.docs.npy")):
        tokens = np.load(shard.with_name(shard.name.replace(".docs.npy", ".npy")))
        starts = np.load(shard)
        assert starts.dtype == np.uint64 and starts[0] == 0
        ends = list(starts[1:]) + [len(tokens)]
        docs.extend(tokens[int(s):int(e)].tolist() for s, e in zip(starts, ends))
    return docs


def dataset_files(root):
    """Every file but the metadata (which names the inputs), with its SHA-256."""
    root = Path(root)
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "dataset_metadata.json"}


def run_prepare_text(*args, check=True, env=None):
    """`python -m tokenfeed.text_corpus` in a fresh process (its own tokenizers thread pool)."""
    r = subprocess.run([sys.executable, "-m", "tokenfeed.text_corpus", *map(str, args)], capture_output=True,
                       text=True, env=env)
    if check and r.returncode != 0:
        raise AssertionError(f"prepare_text {args} failed ({r.returncode}): {r.stderr}")
    return r


def test_ids_equal_the_tokenizers_own_for_every_worker_count(hf_dir, tmp_path):
    from tokenizers import Tokenizer
    docs = documents(3000)
    write_jsonl(tmp_path / "c.jsonl", docs)
    tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    want = [tok.encode(d, add_special_tokens=False).ids + [eos] for d in docs if d != ""]
    reference = None
    for workers in (1, 2, 4):
        out = tmp_path / f"out{workers}"
        run_prepare_text(tmp_path / "c.jsonl", "--output-dir", out, "--hf-tokenizer", hf_dir, "--workers", workers,
                         "--val-split", "0", "--shard-tokens", 20000, "--tokenizer-impl", "tokenizers")
        assert read_token_split(out / "train") == want
        files = dataset_files(out)
        assert reference is None or files == reference
        reference = files
    meta = json.loads((tmp_path / "out1" / "dataset_metadata.json").read_text())
    assert meta["eos_token_id"] == eos
    assert meta["token_dtype"] == "uint16"
    assert meta["splits"]["train"]["empty_documents"] == docs.count("")
    assert meta["tokenizer"]["kind"] == "huggingface"
    assert meta["tokenizer"]["sha256"] == hashlib.sha256((hf_dir / "tokenizer.json").read_bytes()).hexdigest()


@pytest.mark.parametrize("impl", ["tokenizers", "native"])
def test_bos_and_a_named_eos(hf_dir, tmp_path, impl):
    from tokenizers import Tokenizer
    write_jsonl(tmp_path / "c.jsonl", ["one doc", "two docs"])
    tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    s = tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "out", hf_tokenizer=hf_dir, bos=True,
                               eos_token="<s>", val_split=0.0, tokenizer_impl=impl)
    bos = eos = tok.token_to_id("<s>")
    assert s["bos_token_id"] == bos
    assert read_token_split(tmp_path / "out" / "train") == [
        [bos] + tok.encode(t, add_special_tokens=False).ids + [eos] for t in ("one doc", "two docs")]
    with pytest.raises(tokenfeed.ConfigError, match="not a (single )?token"):
        tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "out2", hf_tokenizer=hf_dir, eos_token="<nope>",
                               tokenizer_impl=impl)
    with pytest.raises(tokenfeed.IoError, match="no tokenizer.json"):
        tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "out2", hf_tokenizer=tmp_path, tokenizer_impl=impl)
    assert not (tmp_path / "out2").exists()


def test_auto_encodes_with_the_package_when_the_native_encoder_refuses_the_file(hf_dir, tmp_path, capfd):
    """A tokenizer.json with a feature outside the native encoder's list: the default (auto)
    says why on stderr and the tokenizers package encodes, as the summary says; native is an
    error naming the feature."""
    from tokenizers import Tokenizer
    odd = tmp_path / "odd"
    shutil.copytree(hf_dir, odd)
    spec = json.loads((odd / "tokenizer.json").read_text(encoding="utf-8"))
    spec["model"]["byte_fallback"] = True
    (odd / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    docs = ["one doc", "two docs here"]
    write_jsonl(tmp_path / "c.jsonl", docs)
    s = tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "out", hf_tokenizer=odd, val_split=0.0)
    assert s["tokenizer"] == f"huggingface {odd}"
    err = capfd.readouterr().err
    assert "the native encoder is not used" in err and "byte_fallback" in err, err
    tok = Tokenizer.from_file(str(odd / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    assert read_token_split(tmp_path / "out" / "train") == [tok.encode(t, add_special_tokens=False).ids + [eos]
                                                             for t in docs]
    with pytest.raises(tokenfeed.ConfigError, match="--tokenizer-impl native: .*byte_fallback"):
        tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "out2", hf_tokenizer=odd, tokenizer_impl="native")


def test_parquet_gives_the_bytes_jsonl_gives(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = documents(1500)
    write_jsonl(tmp_path / "c.jsonl", docs + [None])
    table = pa.table({"id": list(range(len(docs) + 1)), "text": docs + [None]})
    pq.write_table(table, tmp_path / "c.parquet", row_group_size=100)
    common = dict(val_split=0.1, shard_tokens=5000, on_error="skip")
    a = tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "a", **common)
    b = tokenfeed.prepare_text(tmp_path / "c.parquet", tmp_path / "b", **common)
    assert dataset_files(tmp_path / "a") == dataset_files(tmp_path / "b")
    assert a["train"] == b["train"] and a["val"] == b["val"]
    assert b["skipped"]["not_a_string"]["count"] == 1
    with pytest.raises(tokenfeed.FormatError, match="has no column 'body'"):
        tokenfeed.prepare_text(tmp_path / "c.parquet", tmp_path / "c", text_field="body")
    with pytest.raises(tokenfeed.FormatError, match=r"c.parquet:1501: not_a_string"):
        tokenfeed.prepare_text(tmp_path / "c.parquet", tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_a_line_that_is_not_utf8_is_named_or_counted_through_the_hf_path(cli, hf_dir, tmp_path):
    """The library's message quotes the bad line; its bytes that are not UTF-8 come out as
    \\xNN, so Python raises the error itself, not a UnicodeDecodeError of the message."""
    (tmp_path / "c.jsonl").write_bytes(b'{"text": "ok"}\n{"text": "caf\xc3 au lait"}\n{"text": "fine"}\n')
    with pytest.raises(tokenfeed.FormatError, match=r"c\.jsonl:2: invalid_json: .*\\xc3"):
        tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "a", hf_tokenizer=hf_dir, val_split=0)
    s = tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "a", hf_tokenizer=hf_dir, val_split=0,
                               on_error="skip")
    assert s["train"]["documents"] == 2 and s["skipped"]["invalid_json"]["count"] == 1
    assert s["skipped"]["invalid_json"]["first"].startswith(f"{tmp_path / 'c.jsonl'}:2:")
    env = dict(os.environ, TOKENFEED_PYTHON=sys.executable)
    r = subprocess.run([cli, "prepare-text", str(tmp_path / "c.jsonl"), "--output-dir", str(tmp_path / "b"),
                        "--hf-tokenizer", str(hf_dir)], capture_output=True, text=True, env=env)
    assert r.returncode == 4 and "c.jsonl:2: invalid_json:" in r.stderr and "codec" not in r.stderr, r.stderr


def test_a_parquet_value_that_is_not_utf8_is_named_or_counted(cli, hf_dir, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    values = [b"first", b"second", b"caf\xc3 au lait", b"fourth"]
    # A string column holding bytes that are not UTF-8 (view does not validate; pyarrow's
    # reader does not either: only to_pylist does).
    texts = pa.array(values, pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": texts}), tmp_path / "c.parquet", row_group_size=2)
    for hf in ({}, {"hf_tokenizer": hf_dir}):
        with pytest.raises(tokenfeed.FormatError, match=r"c\.parquet:3: invalid_utf8: invalid UTF-8 at byte 3"):
            tokenfeed.prepare_text(tmp_path / "c.parquet", tmp_path / "a", val_split=0, **hf)
        s = tokenfeed.prepare_text(tmp_path / "c.parquet", tmp_path / "a", val_split=0, on_error="skip", **hf)
        assert s["train"]["documents"] == 3 and s["skipped"]["invalid_utf8"]["count"] == 1
        shutil.rmtree(tmp_path / "a")
    env = dict(os.environ, TOKENFEED_PYTHON=sys.executable)
    r = subprocess.run([cli, "prepare-text", str(tmp_path / "c.parquet"), "--output-dir", str(tmp_path / "b"),
                        "--on-error", "skip", "--val-split", "0"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and "invalid_utf8: 1" in r.stdout, r.stderr


def test_a_damaged_parquet_file_is_an_error_naming_it(cli, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = documents(400)
    pq.write_table(pa.table({"text": docs}), tmp_path / "c.parquet", row_group_size=100, use_dictionary=False)
    data = bytearray((tmp_path / "c.parquet").read_bytes())
    start = pq.ParquetFile(tmp_path / "c.parquet").metadata.row_group(1).column(0).data_page_offset
    data[start:start + 16] = b"\xff" * 16  # the second row group's page header
    (tmp_path / "d.parquet").write_bytes(bytes(data))
    with pytest.raises(tokenfeed.FormatError, match=r"d\.parquet': row group 1 of column 'text' cannot be read"):
        tokenfeed.prepare_text(tmp_path / "d.parquet", tmp_path / "a", on_error="skip")
    env = dict(os.environ, TOKENFEED_PYTHON=sys.executable)
    r = subprocess.run([cli, "prepare-text", str(tmp_path / "d.parquet"), "--output-dir", str(tmp_path / "b"),
                        "--on-error", "skip"], capture_output=True, text=True, env=env)
    assert r.returncode == 4 and "d.parquet': row group 1" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_the_command_hands_hf_and_parquet_to_the_package(cli, hf_dir, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = documents(300)
    pq.write_table(pa.table({"text": docs}), tmp_path / "c.parquet", row_group_size=64)
    env = dict(os.environ, TOKENFEED_PYTHON=sys.executable)
    r = subprocess.run([cli, "prepare-text", str(tmp_path / "c.parquet"), "--output-dir", str(tmp_path / "out"),
                        "--hf-tokenizer", str(hf_dir), "--val-split", "0"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "prepare-text: wrote" in r.stdout
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    assert read_token_split(tmp_path / "out" / "train") == [
        tok.encode(d, add_special_tokens=False).ids + [eos] for d in docs if d]
    bad = subprocess.run([cli, "prepare-text", str(tmp_path / "c.parquet"), "--output-dir", str(tmp_path / "o2"),
                          "--text-field", "body"], capture_output=True, text=True, env=env)
    assert bad.returncode == 4 and "has no column 'body'" in bad.stderr


def test_killed_runs_resume_onto_the_bytes_of_an_uninterrupted_run(cli, tmp_path):
    docs = documents(30000, seed=3) * 8  # about 30 MB: 30 chunks, a progress line each
    write_jsonl(tmp_path / "c.jsonl", docs)
    common = ["--val-split", "0.01", "--shard-tokens", "60000", "--workers", "1", "--progress-seconds", "0"]
    r = subprocess.run([cli, "prepare-text", str(tmp_path / "c.jsonl"), "--output-dir", str(tmp_path / "full"),
                        *common], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    reference = dataset_files(tmp_path / "full")
    assert len(reference) > 20
    for kill_after in (3, 12, 24):  # progress lines (one per chunk of about 1 MB)
        out = tmp_path / f"killed{kill_after}"
        p = subprocess.Popen([cli, "prepare-text", str(tmp_path / "c.jsonl"), "--output-dir", str(out), *common,
                              "--resume"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines = 0
        for _ in p.stderr:
            lines += 1
            if lines == kill_after:
                p.send_signal(signal.SIGKILL)
                break
        p.wait(timeout=60)
        assert p.returncode == -signal.SIGKILL, "the run ended before it was killed"
        assert not out.exists()
        r = subprocess.run([cli, "prepare-text", str(tmp_path / "c.jsonl"), "--output-dir", str(out), *common,
                            "--resume"], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        assert dataset_files(out) == reference
        full = json.loads((tmp_path / "full" / "dataset_metadata.json").read_text())
        resumed = json.loads((out / "dataset_metadata.json").read_text())
        assert resumed["splits"] == full["splits"] and resumed["content_sha256"] == full["content_sha256"]
        if kill_after >= 12:
            assert "kept from the killed run" in r.stdout
    # Without --resume, a killed run's staging directory is removed and the run starts over.
    p = subprocess.Popen([cli, "prepare-text", str(tmp_path / "c.jsonl"), "--output-dir", str(tmp_path / "fresh"),
                          *common], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for i, _ in enumerate(p.stderr):
        if i == 10:
            p.send_signal(signal.SIGKILL)
            break
    p.wait(timeout=60)
    assert p.returncode == -signal.SIGKILL and not (tmp_path / "fresh").exists()
    r = subprocess.run([cli, "prepare-text", str(tmp_path / "c.jsonl"), "--output-dir", str(tmp_path / "fresh"),
                        *common], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert dataset_files(tmp_path / "fresh") == reference
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_ctrl_c_stops_the_run_and_keeps_it_resumable(tmp_path):
    docs = documents(30000, seed=4) * 8
    write_jsonl(tmp_path / "c.jsonl", docs)
    args = [tmp_path / "c.jsonl", "--output-dir", tmp_path / "out", "--shard-tokens", "20000", "--workers", "1",
            "--progress-seconds", "0"]
    p = subprocess.Popen([sys.executable, "-m", "tokenfeed.text_corpus", *map(str, args)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    for i, _ in enumerate(p.stderr):
        if i == 5:
            started = time.monotonic()
            p.send_signal(signal.SIGINT)
            break
    rest = p.stderr.read()
    p.wait(timeout=30)
    assert time.monotonic() - started < 5
    assert p.returncode == -signal.SIGINT, rest
    assert "--resume" in rest
    r = run_prepare_text(*args, "--resume")
    assert "kept from the killed run" in r.stdout


def test_inspect_deep_verifies_a_prepared_corpus(cli, tmp_path):
    write_jsonl(tmp_path / "c.jsonl", documents(2000))
    tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "out", shard_tokens=20000, val_split=0.05)
    r = subprocess.run([cli, "inspect", str(tmp_path / "out"), "--deep"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "content checksums ok" in r.stdout and "documents" in r.stdout
    shard = tmp_path / "out" / "train" / "shard_00001.npy"
    data = bytearray(shard.read_bytes())
    data[200] ^= 1
    shard.write_bytes(bytes(data))
    r = subprocess.run([cli, "inspect", str(tmp_path / "out"), "--deep"], capture_output=True, text=True)
    assert r.returncode != 0
    assert "train/shard_00001.npy differs" in r.stdout


def test_a_native_run_verifies_a_sample_with_the_tokenizers_package(cli, hf_dir, tmp_path):
    """--verify-sample 1: every document of the native run is encoded by the package too (the
    same ids, and the same bytes as the package's own run); 0: the command's own C++ run."""
    docs = documents(400, seed=3)
    write_jsonl(tmp_path / "c.jsonl", docs)
    env = dict(os.environ, TOKENFEED_PYTHON=sys.executable)
    nonempty = sum(1 for d in docs if d)

    def prepare(out, *options):
        r = subprocess.run([cli, "prepare-text", str(tmp_path / "c.jsonl"), "--output-dir", str(tmp_path / out),
                            "--hf-tokenizer", str(hf_dir), "--val-split", "0", *options],
                           capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stderr
        return r

    r = prepare("verified", "--verify-sample", "1")
    assert f"verified   {nonempty} documents encoded by the tokenizers package too" in r.stdout, r.stdout
    assert f"hf-bpe:{hf_dir / 'tokenizer.json'}" in r.stdout, r.stdout
    r = prepare("unverified", "--verify-sample", "0")
    assert "  verified " not in r.stdout and "hf-bpe:" in r.stdout, r.stdout
    prepare("package", "--tokenizer-impl", "tokenizers")
    shard = Path("train") / "shard_00000.npy"
    for out in ("verified", "unverified"):
        assert (tmp_path / out / shard).read_bytes() == (tmp_path / "package" / shard).read_bytes(), out


def test_a_verify_difference_stops_the_run_naming_the_document(hf_dir, tmp_path, monkeypatch):
    """A verifier that reads one document differently (one id changed: a planted difference)
    stops the native run at that document's file and line; nothing is written."""
    from tokenfeed import text_corpus
    docs = documents(300, seed=4)
    docs[9] = "a planted document"  # line 10
    write_jsonl(tmp_path / "c.jsonl", docs)
    encode = text_corpus.HfTextEncoder.encode

    def planted(self, texts):
        ids = encode(self, texts)
        return [[i ^ 1 if k == 0 and "planted" in t else i for k, i in enumerate(x)] for t, x in zip(texts, ids)]

    monkeypatch.setattr(text_corpus.HfTextEncoder, "encode", planted)
    with pytest.raises(tokenfeed.FormatError,
                       match=r"c\.jsonl:10: tokenizer 'hf-bpe:.*tokenizer\.json' and the verifier disagree at "
                             r"token 0 \(id \d+ against id \d+; \d+ against \d+ ids\)"):
        tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "out", hf_tokenizer=hf_dir, tokenizer_impl="native",
                               verify_sample=1.0, val_split=0)
    assert not (tmp_path / "out").exists()
    # The package's own run has no verifier; the native run with verify_sample=0 sees nothing.
    s = tokenfeed.prepare_text(tmp_path / "c.jsonl", tmp_path / "out", hf_tokenizer=hf_dir, tokenizer_impl="native",
                               verify_sample=0, val_split=0)
    assert s["verified_documents"] == 0 and s["tokenizer"].startswith("hf-bpe:")


def test_one_long_document_costs_its_text_and_its_ids(cli, tmp_path):
    """A 24 MB document through the byte tokenizer (24 M tokens into a uint16 shard) peaks at
    about its text plus its ids (5 x its bytes, docs/pretraining.md), not at the copies the
    writer used to make (315 MB of RSS here before the bound; 128 MB after), and its shard
    holds exactly its bytes and the end-of-text id."""
    rng = random.Random(3)
    text = "".join(rng.choice("abcdefgh ") for _ in range(1 << 16)) * 366  # 23.99 MB, ASCII
    doc = tmp_path / "doc.txt"
    doc.write_text(text)
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); print(r.stderr)")
    result = subprocess.run([sys.executable, "-c", probe, cli, "prepare-text", str(doc), "--output-dir",
                             str(tmp_path / "out"), "--max-document-bytes", str(32 << 20), "--val-split", "0",
                             "--workers", "2"], capture_output=True, text=True, timeout=300)
    first, rest = result.stdout.split("\n", 1)
    code, peak_kib = map(int, first.split())
    assert code == 0, rest
    shard = np.load(tmp_path / "out" / "train" / "shard_00000.npy")
    assert shard.dtype == np.uint16 and len(shard) == len(text) + 1
    assert np.array_equal(shard[:-1], np.frombuffer(text.encode(), dtype=np.uint8))
    assert peak_kib * 1024 < 6.5 * len(text), peak_kib
