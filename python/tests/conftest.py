"""Shared fixtures: test datasets written with tokenfeed's own DatasetWriter, configs, and
the `tokenfeed` command for the equality tests."""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tokenfeed

REPO = Path(__file__).resolve().parents[2]

# The byte tokenizer's layout: ids 0..255 are bytes, then the template's special tokens.
SPECIAL = dict(system=256, user=257, assistant=258, tool=259, eot=260)
VOCAB = 261


@pytest.fixture(autouse=True, scope="session")
def _quiet_logs():
    tokenfeed.set_logging(False)
    yield
    tokenfeed.set_logging(True)


def require_torch():
    """torch, else this test's skip or failure. python/run_tests.sh sets TOKENFEED_TEST_TORCH:
    `required` (TOKENFEED_TORCH=debian or pypi: the run is meant to test torch, so its absence
    fails the test) or `skip` (TOKENFEED_TORCH=0). Unset (pytest run by hand): skip when torch
    is not installed."""
    mode = os.environ.get("TOKENFEED_TEST_TORCH", "")
    if mode == "skip":
        pytest.skip("TOKENFEED_TORCH=0: the torch tests are skipped")
    try:
        import torch
    except ImportError as e:
        if mode == "required":
            pytest.fail(f"torch is required in this run (TOKENFEED_TEST_TORCH=required) but does not import: {e}")
        pytest.skip(f"torch is not installed: {e}")
    return torch


def special_ids():
    return tokenfeed.SpecialTokenIds(**SPECIAL)


def random_conversation(rng, max_turns=4, max_len=120):
    """A pre-tokenized conversation: (role, ids) pairs with content ids below 256."""
    messages = []
    if rng.random() < 0.4:
        messages.append(("system", rng.integers(0, 256, rng.integers(1, 30))))
    for _ in range(rng.integers(1, max_turns + 1)):
        messages.append(("user", rng.integers(0, 256, rng.integers(1, max_len))))
        messages.append(("assistant", rng.integers(0, 256, rng.integers(1, max_len))))
    return messages


def write_sft_dataset(root, episodes=300, seed=0, token_dtype="uint16", shard_tokens=0, val_episodes=40):
    """An episode-indexed chat dataset, as `tokenfeed prepare` would write it, made from
    pre-tokenized random conversations through the chat template functions and the
    DatasetWriter binding. Returns the list of (ids, mask) of train/ in episode order."""
    root = Path(root)
    rng = np.random.default_rng(seed)
    special = special_ids()
    default_system = np.frombuffer(tokenfeed.DEFAULT_SYSTEM_TEXT.encode(), dtype=np.uint8)
    written = {}
    for split, count in (("train", episodes), ("val", val_episodes)):
        if count == 0:
            continue
        rows = []
        with tokenfeed.DatasetWriter(root / split, token_dtype=token_dtype, shard_tokens=shard_tokens) as w:
            for _ in range(count):
                ids = tokenfeed.serialize_chat(random_conversation(rng), special, default_system, vocab_size=VOCAB)
                mask = tokenfeed.sft_loss_mask_for_ids(ids, special)
                w.add(ids, mask)
                rows.append((ids, mask))
        written[split] = rows
    tokenfeed.write_dataset_metadata(root, token_dtype=token_dtype, mask_dtype="uint8", vocab_size=VOCAB,
                                     eot_token_id=SPECIAL["eot"], special_tokens=special)
    return written


def write_token_stream(root, tokens=200_000, seed=0, eos=0):
    """nanoGPT-style train.bin/val.bin (uint16) with end-of-text tokens between documents."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for split, n in (("train", tokens), ("val", tokens // 10)):
        t = rng.integers(1, 50000, n, dtype=np.uint16)
        t[rng.random(n) < 0.01] = eos
        t.tofile(root / f"{split}.bin")
    tokenfeed.write_dataset_metadata(root, token_dtype="uint16", mask_dtype=None, eos_token_id=eos)


def write_config(path, **keys):
    """An XML config with these keys."""
    body = "".join(f"  <{k}>{str(v).lower() if isinstance(v, bool) else v}</{k}>\n" for k, v in keys.items())
    Path(path).write_text(f"<training>\n{body}</training>\n")
    return str(path)


@pytest.fixture(scope="session")
def sft_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft")
    write_sft_dataset(root, episodes=300, seed=1, shard_tokens=20_000)
    return root


@pytest.fixture(scope="session")
def sft_written(tmp_path_factory):
    root = tmp_path_factory.mktemp("sft_small")
    return root, write_sft_dataset(root, episodes=120, seed=2, token_dtype="uint32", val_episodes=0)


@pytest.fixture(scope="session")
def stream_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream")
    write_token_stream(root)
    return root


def base_keys(dataset_dir, **extra):
    keys = dict(dataset_dir=str(dataset_dir), batch_size=4, block_size=64, audit_log_dir="",
                prefetch_depth=2, decode_threads=1)
    keys.update(extra)
    return keys


def _find_cli():
    env = os.environ.get("TOKENFEED_CLI")
    if env:
        return env if os.access(env, os.X_OK) else None
    for candidate in (REPO / "build" / "tools" / "tokenfeed", REPO / "build" / "py-cli" / "tools" / "tokenfeed"):
        if os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which("tokenfeed")


@pytest.fixture(scope="session")
def cli():
    path = _find_cli()
    if path is None:
        pytest.skip("the tokenfeed command was not found: set TOKENFEED_CLI, or build it "
                    "(python/run_tests.sh builds it into build/py-cli when build/tools/tokenfeed is absent)")
    return path


def run_cli(cli, *args):
    result = subprocess.run([cli, *map(str, args)], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"{cli} {' '.join(map(str, args))} failed ({result.returncode}): {result.stderr}")
    return result


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torchrun(tmp_path, worker, nproc, cases, timeout=300):
    """Runs `worker` under torchrun with `nproc` processes (gloo on the loopback interface)
    on every case at once (one launch: starting processes that import torch is what takes
    time) and returns what it wrote: {case name: per-rank results}."""
    out = tmp_path / "gathered.json"
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo on the loopback interface
    env["OMP_NUM_THREADS"] = "1"
    # --redirects/--tee: torch 1.13's defaults ("0") do not parse on Python >= 3.11 (its
    # Std.from_str finds no flag of value 0); 1 and 2 do. Workers' stdout goes to log_dir,
    # their stderr there and to ours, so a failing rank's traceback is in the report.
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={nproc}",
           "--rdzv_backend=static", "--master_addr=127.0.0.1", f"--master_port={free_port()}",
           "--redirects=1", "--tee=2", f"--log_dir={tmp_path / 'torchrun-logs'}",
           str(worker), json.dumps(cases), str(out)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"torchrun failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return json.loads(out.read_text())
