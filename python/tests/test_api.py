"""Iteration, the len-like facts, stats, and the type stubs against the real module."""
import ast
from pathlib import Path

import pytest

import tokenfeed
from conftest import base_keys


def test_iter(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    it = loader.iter("train", steps=7)
    assert len(it) == 7
    assert [b.step for b in it] == list(range(7))
    assert len(it) == 0
    endless = loader.iter("val")
    with pytest.raises(TypeError):
        len(endless)
    assert [next(endless).step for _ in range(3)] == [0, 1, 2]
    assert [b.split for b in loader.iter("val", steps=2)] == ["val", "val"]


def test_facts_and_stats(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True))
    info = loader.info("train")
    assert info["episodes"] == 300 and info["kept_episodes"] == 300 and info["mask"]
    assert info["shards"] > 1  # shard_tokens=20000
    assert loader.num_episodes() == 300 and loader.num_episodes("val") == 40
    assert loader.batches_per_epoch() == 300 // 4
    epochs = set()
    for batch in loader.iter("train", steps=loader.batches_per_epoch() + 1):
        epochs.add(batch.epoch)
    assert epochs == {0, 1}
    s = loader.stats("train")
    assert s["batches"] == 76 and s["batches_per_epoch"] == 75
    for key in ("batches_per_s", "tokens_per_s", "real_tokens_per_s", "stall_fraction", "open_ms",
                "prefetch_depth", "decode_threads", "rss_anon_mb", "waits", "total_wait_us", "max_wait_us"):
        assert key in s, key
    assert set(s["get_batch_us"]) == {"p50", "p99", "max", "mean"}
    assert 0 < s["get_batch_us"]["p50"] <= s["get_batch_us"]["p99"] <= s["get_batch_us"]["max"]
    assert s["tokens_per_s"] > s["real_tokens_per_s"] > 0 and s["batches_per_s"] > 0
    assert s["decode_threads"] == 1 and s["prefetch_depth"] == 2
    assert loader.stats("val")["batches"] == 0
    assert loader.config["batch_size"] == "4" and loader.config["dataset_mode"] == "sft_episode"
    assert len(loader.fingerprint) > 0


def _stub():
    return ast.parse((Path(tokenfeed.__file__).parent / "__init__.pyi").read_text())


def test_stubs_match_the_module():
    tree = _stub()
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    names = {n for n in names if not n.startswith("_") or n == "__version__"}
    assert names == set(tokenfeed.__all__), names ^ set(tokenfeed.__all__)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            cls = getattr(tokenfeed, node.name)
            for member in node.body:
                if isinstance(member, ast.FunctionDef):
                    assert hasattr(cls, member.name), f"{node.name}.{member.name}"
    for name in tokenfeed.__all__:
        assert hasattr(tokenfeed, name), name
    assert (Path(tokenfeed.__file__).parent / "py.typed").exists()
