"""Weight changes from Python: Loader.set_mixture_weights against a config stage, the
weights' conversion and every refusal (the loader usable after), the state's change
history on resume, per_source_mean (numpy and torch), and examples/online_mixing.py."""
import json
import subprocess
import sys

import numpy as np
import pytest

import tokenfeed
from conftest import REPO, require_torch


def keys(sft_dir, stream_dir, **extra):
    k = dict(batch_size=4, block_size=32, audit_log_dir="", prefetch_depth=2, decode_threads=2,
             mixture=[dict(name="chat", dataset_dir=str(sft_dir), weight=3),
                      dict(name="web", dataset_dir=str(stream_dir), weight=1, dataset_mode="token_stream")])
    k.update(extra)
    return k


def stream(loader, steps):
    return [(b.tokens.copy(), b.source_ids.copy()) for b in loader.iter(steps=steps)]


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b))


def test_a_change_is_a_config_stage_at_its_step(sft_dir, stream_dir):
    staged = tokenfeed.Loader(keys(sft_dir, stream_dir, stages=[dict(until_step=6), dict(weights={"web": 2.5})]))
    want = stream(staged, 12)
    loader = tokenfeed.Loader(keys(sft_dir, stream_dir))
    got = stream(loader, 3)
    assert loader.earliest_weight_step() == 5
    loader.set_mixture_weights({"web": 2.5}, at_step=6)
    got += stream(loader, 9)
    assert same(got, want)
    state = loader.state_dict()
    assert state["weight_changes"] == [{"step": 6, "weights": {"web": "2.5"}}]
    assert not same(stream(tokenfeed.Loader(keys(sft_dir, stream_dir)), 12), want)


@pytest.mark.parametrize("weight,text", [(0.1, "0.1"), (3, "3"), (2.0, "2"), ("1.50", "1.5"), (np.float64(0.25), "0.25"),
                                         (np.int64(4), "4")])
def test_weights_convert_exactly(sft_dir, stream_dir, weight, text):
    loader = tokenfeed.Loader(keys(sft_dir, stream_dir))
    loader.set_mixture_weights({"chat": weight}, at_step=loader.earliest_weight_step())
    assert loader.state_dict()["weight_changes"][0]["weights"] == {"chat": text}


def test_refusals_name_what_is_wrong_and_change_nothing(sft_dir, stream_dir):
    want = stream(tokenfeed.Loader(keys(sft_dir, stream_dir)), 8)
    loader = tokenfeed.Loader(keys(sft_dir, stream_dir))
    got = stream(loader, 2)
    with pytest.raises(tokenfeed.UsageError, match=r"at_step=3\).*earliest step the loader can still change is 4"):
        loader.set_mixture_weights({"chat": 1}, at_step=3)
    bad = [({"code": 1}, "unknown source 'code'"), ({"chat": -1}, "weight '-1' of source 'chat'"),
           ({"chat": float("nan")}, "weight 'nan' of source 'chat'"), ({"chat": 1e-7}, "weight '1e-07'"),
           ({"chat": True}, "source 'chat': weight must be a number"), ({"chat": 0, "web": 0}, "weight is zero"),
           ({}, "names no source"), ([("chat", 1)], "must be a mapping")]
    for weights, message in bad:
        with pytest.raises(tokenfeed.ConfigError, match=message):
            loader.set_mixture_weights(weights, at_step=9)
    assert "weight_changes" not in loader.state_dict()
    got += stream(loader, 6)
    assert same(got, want)
    single = tokenfeed.Loader(dict(dataset_dir=str(sft_dir), batch_size=2, block_size=32, audit_log_dir=""))
    with pytest.raises(tokenfeed.ConfigError, match="one dataset"):
        single.set_mixture_weights({"chat": 1}, at_step=5)
    with pytest.raises(tokenfeed.ConfigError, match="one dataset"):
        single.earliest_weight_step()
    single.get_batch()


def test_resume_applies_the_states_changes(sft_dir, stream_dir, tmp_path):
    def run(save_at=None):
        loader = tokenfeed.Loader(keys(sft_dir, stream_dir))
        loader.set_mixture_weights({"chat": 1, "web": 4}, at_step=3)
        out, state = [], None
        for step in range(14):
            if step == 5:
                loader.set_mixture_weights({"chat": 0.5}, at_step=11)
            if step == save_at:
                state = loader.state_dict()
            out += stream(loader, 1)
        return out, state

    whole, _ = run()
    _, state = run(save_at=8)
    resumed = tokenfeed.Loader(keys(sft_dir, stream_dir))
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert same(stream(resumed, 6), whole[8:])
    # Elastic: 2 ranks of 2 rows, the same global batch.
    for rank in range(2):
        half = tokenfeed.Loader(keys(sft_dir, stream_dir, batch_size=2, world_size=2, rank=rank))
        half.load_state_dict(state)
        for (tokens, sources), (all_tokens, all_sources) in zip(stream(half, 6), whole[8:]):
            np.testing.assert_array_equal(tokens, all_tokens[2 * rank:2 * rank + 2])
            np.testing.assert_array_equal(sources, all_sources[2 * rank:2 * rank + 2])
    other = tokenfeed.Loader(keys(sft_dir, stream_dir))
    other.set_mixture_weights({"chat": 1, "web": 4}, at_step=3)
    with pytest.raises(tokenfeed.StateError, match="other mixture weight changes"):
        other.load_state_dict(state)
    other.get_batch()


def test_per_source_mean_numpy():
    ids = np.array([0, 2, 0, 2], dtype=np.int32)
    rows = np.array([1.0, 4.0, 3.0, 8.0])
    np.testing.assert_array_equal(tokenfeed.per_source_mean(rows, ids, 4)[[0, 2]], [2.0, 6.0])
    assert np.isnan(tokenfeed.per_source_mean(rows, ids, 4)[[1, 3]]).all()
    tokens = np.array([[1.0, 2.0, np.nan], [4.0, 4.0, 4.0], [5.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    weights = np.array([[1, 1, 0], [1, 1, 1], [2, 0, 0], [0, 0, 0]], dtype=np.float32)
    means = tokenfeed.per_source_mean(tokens, ids, 3, weights=weights)
    np.testing.assert_allclose(means[0], (1 + 2 + 2 * 5) / 4)  # every token of the source's rows together
    assert means[2] == 4.0 and np.isnan(means[1])
    np.testing.assert_allclose(tokenfeed.per_source_mean(tokens[1:], ids[1:], 3)[2], (12 + 3) / 6)
    with pytest.raises(ValueError, match="source ids must be in"):
        tokenfeed.per_source_mean(rows, ids, 2)
    with pytest.raises(ValueError, match="weights must have the values' shape"):
        tokenfeed.per_source_mean(tokens, ids, 3, weights=weights[:, :2])
    with pytest.raises(ValueError, match="source_ids must have shape"):
        tokenfeed.per_source_mean(rows, ids[:3], 3)


def test_per_source_mean_torch():
    torch = require_torch()
    ids = np.array([1, 0, 1], dtype=np.int32)  # numpy, as batch.source_ids
    loss = torch.tensor([[2.0, 4.0], [1.0, 1.0], [6.0, float("inf")]], dtype=torch.float32)
    weights = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    means = tokenfeed.per_source_mean(loss, ids, 3, weights=weights)
    assert isinstance(means, torch.Tensor) and means.dtype == torch.float32
    assert means[0].item() == 1.0 and means[1].item() == 4.0 and torch.isnan(means[2])
    numpy_means = tokenfeed.per_source_mean(loss.numpy(), ids, 3, weights=weights.numpy())
    np.testing.assert_allclose(means.numpy(), numpy_means)


def test_the_online_mixing_example_resumes_with_the_same_batches():
    result = subprocess.run([sys.executable, str(REPO / "examples" / "online_mixing.py"), "--steps", "40",
                             "--kill-at", "17"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "killed at step 17 and resumed" in result.stdout


def test_the_command_resumes_a_state_with_changes_and_audit_prints_them(sft_dir, stream_dir, tmp_path, cli):
    from conftest import run_cli

    audit = tmp_path / "audit"
    loader = tokenfeed.Loader(keys(sft_dir, stream_dir, audit_log_dir=str(audit)))
    loader.set_mixture_weights({"chat": 1, "web": 4}, at_step=3)
    loader.set_mixture_weights({"web": 0.5}, at_step=9)
    want = stream(loader, 12)
    loader.close()
    loader_state = _state_at(sft_dir, stream_dir, 4)  # both changes made, the one at step 9 not reached
    assert loader_state["weight_changes"][1] == {"step": 9, "weights": {"web": "0.5"}}
    (tmp_path / "in.json").write_text(json.dumps(loader_state))
    xml = tmp_path / "mix.xml"
    xml.write_text(f"""<training><batch_size>4</batch_size><block_size>32</block_size><audit_log_dir></audit_log_dir>
  <mixture>
    <source name="chat" dataset_dir="{sft_dir}" weight="3"/>
    <source name="web" dataset_dir="{stream_dir}" weight="1" dataset_mode="token_stream"/>
  </mixture></training>""")
    run_cli(cli, "dump", "--config", xml, "--batches", 8, "--out", tmp_path / "out", "--load-state",
            tmp_path / "in.json", "--save-state", tmp_path / "out.json")
    sources = np.load(tmp_path / "out" / "source_ids.npy")
    np.testing.assert_array_equal(sources, np.stack([s for _, s in want[4:12]]))
    assert json.loads((tmp_path / "out.json").read_text())["weight_changes"] == loader_state["weight_changes"]
    log = next(audit.iterdir())
    printed = run_cli(cli, "audit", log).stdout
    lines = [line for line in printed.splitlines() if line.strip().startswith("weights ")]
    assert len(lines) == 2, printed
    assert "step=3" in lines[0] and 'weights="chat=1,web=4"' in lines[0] and "step=9" in lines[1], printed


def _state_at(sft_dir, stream_dir, step):
    loader = tokenfeed.Loader(keys(sft_dir, stream_dir))
    loader.set_mixture_weights({"chat": 1, "web": 4}, at_step=3)
    loader.set_mixture_weights({"web": 0.5}, at_step=9)
    stream(loader, step)
    return loader.state_dict()
