"""Content checksums: DatasetWriter records each shard's SHA-256 in dataset_metadata.json,
write_dataset_metadata keeps them, and `tokenfeed inspect --deep` verifies them."""
import hashlib
import json
import subprocess

import numpy as np

import tokenfeed
from conftest import run_cli


def run_status(cli, *args):
    return subprocess.run([cli, *map(str, args)], capture_output=True, text=True)


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_writer_records_and_metadata_keeps_checksums(tmp_path, cli):
    rng = np.random.default_rng(0)
    with tokenfeed.DatasetWriter(tmp_path / "train", token_dtype="uint16", shard_tokens=64) as w:
        for _ in range(20):
            n = int(rng.integers(2, 20))
            w.add(rng.integers(0, 1000, n), rng.integers(0, 2, n))
    recorded = json.loads((tmp_path / "dataset_metadata.json").read_text())["content_sha256"]
    shards = sorted(p for p in (tmp_path / "train").iterdir())
    assert sorted(recorded) == [f"train/{p.name}" for p in shards] and len(shards) > 1
    for shard in shards:
        assert recorded[f"train/{shard.name}"] == {f: sha256(shard / f) for f in ("episodes.idx", "tokens.bin", "mask.bin")}

    tokenfeed.write_dataset_metadata(tmp_path, token_dtype="uint16", eot_token_id=0, vocab_size=1000)
    meta = json.loads((tmp_path / "dataset_metadata.json").read_text())
    assert meta["content_sha256"] == recorded and meta["vocab_size"] == 1000
    r = run_cli(cli, "inspect", str(tmp_path), "--deep")
    assert r.returncode == 0 and f"content checksums ok ({len(shards)} shards, sha256)" in r.stdout, r.stdout

    tokens = shards[0] / "tokens.bin"
    data = bytearray(tokens.read_bytes())
    data[0] ^= 1
    tokens.write_bytes(bytes(data))
    r = run_status(cli, "inspect", str(tmp_path), "--deep")
    assert r.returncode == 4 and f"train/{shards[0].name}/tokens.bin differs" in r.stdout, r.stdout
