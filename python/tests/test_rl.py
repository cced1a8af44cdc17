"""tokenfeed.RLLoader: advantages and weights against a reference, filtering, packing,
truncation, determinism, resume, prefetch, and a sampler that raises."""
import subprocess
import sys
import threading
import zlib

import numpy as np
import pytest

import tokenfeed
from conftest import REPO, require_torch

GROUP = 4
IGNORE = tokenfeed.IGNORE_INDEX
PAD = 0


@pytest.fixture(scope="module")
def prompts_dir(tmp_path_factory):
    """40 prompts of 2..7 ids, ids from 1 (0 is the pad id)."""
    root = tmp_path_factory.mktemp("rl_prompts")
    rng = np.random.default_rng(3)
    prompts = [rng.integers(1, 50, rng.integers(2, 8)) for _ in range(40)]
    with tokenfeed.DatasetWriter(root / "train", token_dtype="uint16", write_mask=False) as w:
        for p in prompts:
            w.add(p)
    tokenfeed.write_dataset_metadata(root, token_dtype="uint16", mask_dtype=None, eot_token_id=PAD)
    return root, prompts


def toy_group(prompt_ids, flat=lambda p: False, extra=0):
    """A pure function of the prompt: completions of 1..6 (+ extra) ids, log-probs, rewards
    in {0, 1, 2} (all equal when flat(prompt))."""
    prompt_ids = np.asarray(prompt_ids)
    rng = np.random.default_rng(zlib.crc32(prompt_ids.astype(np.int64).tobytes()))
    # each completion's first id is 200 + its index, so a packed sequence tells which it is
    completions = [np.concatenate([[200 + k], rng.integers(100, 200, rng.integers(0, 6) + extra)]) for k in range(GROUP)]
    log_probs = [-rng.random(len(c)).astype(np.float32) for c in completions]
    rewards = np.full(GROUP, 1.0) if flat(prompt_ids) else rng.integers(0, 3, GROUP).astype(float)
    if not flat(prompt_ids) and rewards.std() == 0:
        rewards[0] += 1.0
    return tokenfeed.ScoredGroup(completions, rewards, log_probs)


def make_loader(prompts_dir, sampler=toy_group, **kw):
    root, _ = prompts_dir
    args = dict(group_size=GROUP, batch_size=4, block_size=24)
    args.update(kw)
    return tokenfeed.RLLoader({"dataset_dir": str(root), "audit_log_dir": ""}, sampler, **args)


def copy_of(batch):
    return {k: np.array(v) for k, v in batch.arrays().items()}


def same(a, b):
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def reference_advantages(rewards, mode, eps=1e-6):
    r = np.asarray(rewards, dtype=np.float64)
    d = r - r.mean()
    return d / (r.std() + eps) if mode == "grpo" else d


def check_batch(batch, prompts, mode, sampler=toy_group, T=24):
    """Every sequence against the group it came from; the packing invariants."""
    tokens, labels, w = batch.tokens.ravel(), batch.labels.ravel(), batch.token_weights.ravel()
    pos, lp = batch.position_ids.ravel(), batch.log_probs.ravel()
    cu, rewards, gids, segs = batch.cu_seqlens, batch.rewards, batch.group_ids, batch.segments
    assert cu[0] == 0 and cu[-1] == batch.rows * batch.cols and np.all(np.diff(cu) > 0)
    assert len(rewards) == len(gids) == len(cu) - 1 == batch.num_sequences
    seen = {}
    real = 0
    for s in range(len(cu) - 1):
        b, e = cu[s], cu[s + 1]
        assert b // T == (e - 1) // T, "a sequence crosses rows"
        assert np.array_equal(pos[b:e], np.arange(e - b)), "positions restart per sequence"
        if gids[s] < 0:
            assert e % T == 0 and rewards[s] == 0
            assert np.all(tokens[b:e] == PAD) and np.all(labels[b:e] == IGNORE) and np.all(w[b:e] == 0)
            continue
        seg = segs[real]
        real += 1
        assert seg["row"] * T + seg["column"] == b and seg["positions"] == e - b
        prompt = np.asarray(prompts[seg["episode"]], dtype=np.int64)
        group = sampler(prompt)
        P = len(prompt)
        k = int(labels[b + P - 1]) - 200  # first fit may put a later completion in an earlier row
        seen[gids[s]] = seen.get(gids[s], 0) + 1
        seq = np.concatenate([prompt, group.completions[k]])[:T + 1]
        assert e - b == len(seq) - 1
        assert np.array_equal(tokens[b:e], seq[:-1])
        assert rewards[s] == np.float32(group.rewards[k])
        # prompt positions: no label, weight 0; completion label positions: the advantage
        assert np.all(labels[b:b + P - 1] == IGNORE) and np.all(w[b:b + P - 1] == 0) and np.all(lp[b:b + P - 1] == 0)
        assert np.array_equal(labels[b + P - 1:e], seq[P:])
        adv = reference_advantages(group.rewards, mode)[k]
        np.testing.assert_allclose(w[b + P - 1:e], adv, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(lp[b + P - 1:e], group.log_probs[k][:e - b - P + 1])
    assert real == len(segs)
    assert all(n == GROUP for n in seen.values()), "a group is whole in its batch"
    return seen


@pytest.mark.parametrize("mode", ["grpo", "mean_only"])
def test_weights_labels_and_packing_against_a_reference(prompts_dir, mode):
    _, prompts = prompts_dir
    loader = make_loader(prompts_dir, advantage=mode)
    groups = 0
    for step, batch in zip(range(8), loader):
        assert batch.step == step and batch.shape == (4, 24)
        assert isinstance(batch.tokens, np.ndarray) and batch.tokens.dtype == np.int64
        assert batch.log_probs.dtype == np.float32 and batch.log_probs.shape == (4, 24)
        assert batch.rewards.dtype == np.float32 and batch.group_ids.dtype == np.int64
        assert {"log_probs", "rewards", "group_ids", "segments", "cu_seqlens"} <= set(batch.arrays())
        groups += len(check_batch(batch, prompts, mode))
        assert loader.metrics()["batch"]["valid_groups"] == len(set(batch.group_ids[batch.group_ids >= 0]))
    assert loader.metrics()["total"]["valid_groups"] == groups


def test_zero_variance_groups_are_dropped_and_counted(prompts_dir):
    _, prompts = prompts_dir
    flat = lambda p: int(p[0]) % 3 == 0  # noqa: E731
    sampler = lambda p: toy_group(p, flat)  # noqa: E731
    loader = make_loader(prompts_dir, sampler)
    batch_sum = {"attempts": 0, "zero_var_groups": 0, "valid_groups": 0}
    for _, batch in zip(range(6), loader):
        check_batch(batch, prompts, "grpo", sampler)
        for seg in batch.segments:
            assert not flat(prompts[seg["episode"]])
        m = loader.metrics()["batch"]
        assert m["attempts"] == m["valid_groups"] + m["zero_var_groups"]
        assert abs(m["mean_advantage"]) < 1e-9 and m["mean_abs_advantage"] > 0
        mean_reward = batch.rewards[batch.group_ids >= 0].mean()
        assert m["mean_reward"] == pytest.approx(mean_reward, rel=1e-6)
        for k in batch_sum:
            batch_sum[k] += m[k]
    total = loader.metrics()["total"]
    assert total["zero_var_groups"] > 0
    assert {k: total[k] for k in batch_sum} == batch_sum
    assert total["attempts_per_batch"] == pytest.approx(batch_sum["attempts"] / 6)


def test_max_attempts_raises_naming_the_prompts(prompts_dir):
    loader = make_loader(prompts_dir, lambda p: toy_group(p, flat=lambda q: True), max_attempts=3)
    with pytest.raises(tokenfeed.PipelineError) as e:
        next(loader)
    message = str(e.value)
    assert "max_attempts (3)" in message
    for index in range(3):
        assert f"pull index {index} (prompt episode " in message
    assert "pull index 3" not in message


def test_too_long_sequences_are_cut_and_counted(prompts_dir):
    _, prompts = prompts_dir
    sampler = lambda p: toy_group(p, extra=12)  # noqa: E731  (completions of 13..18 ids)
    loader = make_loader(prompts_dir, sampler, block_size=16, batch_size=4)
    batch = next(loader)
    check_batch(batch, prompts, "grpo", sampler, T=16)
    expected = 0
    for gid in set(batch.group_ids[batch.group_ids >= 0].tolist()):
        episode = batch.segments[list(batch.group_ids[batch.group_ids >= 0]).index(gid)]["episode"]
        group = sampler(np.asarray(prompts[episode]))
        expected += sum(len(prompts[episode]) + len(c) > 17 for c in group.completions)
    assert expected > 0
    assert loader.metrics()["batch"]["truncated_sequences"] == expected


def test_deterministic_and_resumed_exactly(prompts_dir):
    calls = []

    def recording(p):
        calls.append(tuple(int(x) for x in p))
        return toy_group(p, flat=lambda q: int(q[0]) % 4 == 1)

    loader = make_loader(prompts_dir, recording, batch_size=3, block_size=20)
    straight, states, asked_from = [], [], []
    for _ in range(12):
        states.append(loader.state_dict())
        asked_from.append(len(calls))
        straight.append(copy_of(next(loader)))
    final = loader.metrics()["total"]
    straight_calls = list(calls)

    again = make_loader(prompts_dir, recording, batch_size=3, block_size=20)
    assert all(same(copy_of(next(again)), b) for b in straight)

    for at in (3, 7):
        calls.clear()
        resumed = make_loader(prompts_dir, recording, batch_size=3, block_size=20)
        resumed.load_state_dict(states[at])
        for step in range(at, 12):
            batch = next(resumed)
            assert batch.step == step
            assert same(copy_of(batch), straight[step]), step
        assert resumed.metrics()["total"] == final
        # the same prompts in the same order as the run it continues (from the first group
        # not in an emitted batch)
        start = states[at]["batcher"]["cursor"]
        assert calls == straight_calls[start:start + len(calls)]

    other = make_loader(prompts_dir, recording, batch_size=3, block_size=20, epoch_seed=5)
    with pytest.raises(tokenfeed.StateError):
        other.load_state_dict(states[3])
    with pytest.raises(tokenfeed.StateError):
        loader.load_state_dict({"format": "x"})


def test_prefetch_gives_the_pull_loops_batches(prompts_dir):
    flat = lambda q: int(q[0]) % 4 == 1  # noqa: E731
    pulled = make_loader(prompts_dir, lambda p: toy_group(p, flat))
    expected = [copy_of(next(pulled)) for _ in range(10)]
    for depth in (1, 3, 16):
        with make_loader(prompts_dir, lambda p: toy_group(p, flat), prefetch_groups=depth) as prefetched:
            got = [copy_of(next(prefetched)) for _ in range(10)]
            assert all(same(a, b) for a, b in zip(got, expected)), depth
            assert prefetched.metrics() == pulled.metrics()
            # resume in prefetch mode: the thread restarts at the state's cursor
            state = prefetched.state_dict()
            tail = copy_of(next(prefetched))
            prefetched.load_state_dict(state)
            assert same(copy_of(next(prefetched)), tail)
    assert not [t for t in threading.enumerate() if t.name == "tokenfeed-rl-prefetch" and t.is_alive()]


def _with_timeout(fn, seconds=60):
    """Runs fn on a thread; fails the test if it does not return in time (a hang)."""
    result = {}

    def run():
        try:
            result["value"] = fn()
        except BaseException as e:  # noqa: BLE001
            result["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"no result after {seconds} s: a hang"
    return result


@pytest.mark.parametrize("prefetch", [0, 4])
def test_a_raising_sampler_reaches_the_trainer(prompts_dir, prefetch):
    count = [0]

    def flaky(p):
        count[0] += 1
        if count[0] == 7:
            raise ConnectionError("inference server went away on call 7")
        return toy_group(p)

    loader = make_loader(prompts_dir, flaky, prefetch_groups=prefetch)

    def run():
        for _ in range(50):
            next(loader)

    result = _with_timeout(run)
    error = result.get("error")
    assert isinstance(error, ConnectionError), result
    assert str(error) == "inference server went away on call 7"
    # the loader goes on from the last batch it emitted
    result = _with_timeout(lambda: copy_of(next(loader)))
    assert "value" in result, result
    loader.close()
    assert not [t for t in threading.enumerate() if t.name == "tokenfeed-rl-prefetch" and t.is_alive()]


def test_bad_sampler_results_are_usage_errors(prompts_dir):
    with pytest.raises(tokenfeed.UsageError, match="group_size is 4"):
        next(make_loader(prompts_dir, lambda p: tokenfeed.ScoredGroup([[1, 2]] * 3, [0, 1, 2])))
    with pytest.raises(tokenfeed.UsageError, match="expected a ScoredGroup"):
        next(make_loader(prompts_dir, lambda p: 42))
    with pytest.raises(tokenfeed.UsageError, match="rewards for 4 completions"):
        next(make_loader(prompts_dir, lambda p: {"completions": [[1]] * 4, "rewards": [0, 1]}))
    with pytest.raises(tokenfeed.ConfigError, match="advantage"):
        make_loader(prompts_dir, advantage="ppo")


def test_torch_views_share_the_batch_memory(prompts_dir):
    torch = require_torch()
    batch = next(make_loader(prompts_dir))
    t = batch.to_torch(["tokens", "token_weights", "log_probs", "rewards", "group_ids"])
    assert t["tokens"].data_ptr() == batch.tokens.ctypes.data
    assert t["token_weights"].dtype == torch.float32 and t["rewards"].shape == (batch.num_sequences,)


def test_grpo_example_reward_goes_up():
    require_torch()
    result = subprocess.run([sys.executable, str(REPO / "examples" / "grpo_tiny.py"), "--steps", "40", "--check"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "step  40" in result.stdout


def test_token_ids_outside_the_vocabulary_are_refused(prompts_dir):
    def bad(p, value):
        g = toy_group(p)
        g.completions[2] = np.array([201, value, 150])
        g.log_probs = None
        return g

    for value in (-1, 300, 2**40):
        loader = make_loader(prompts_dir, lambda p: bad(p, value), vocab_size=300)
        with pytest.raises(tokenfeed.UsageError) as e:
            next(loader)
        assert (f"pull index 0 (prompt episode {loader_episode(loader, 0)}): completion 2 holds token id {value} "
                "at position 1, outside the vocabulary [0, 300)") in str(e.value)
    # ids below the vocabulary pass; without one known, negative ids are still refused
    next(make_loader(prompts_dir, vocab_size=300))
    with pytest.raises(tokenfeed.UsageError, match="completion 2 holds token id -5 at position 1, negative"):
        next(make_loader(prompts_dir, lambda p: bad(p, -5)))


def loader_episode(loader, index):
    return loader._prompts.at(index)[1]


def test_the_vocabulary_comes_from_the_prompt_metadata(tmp_path):
    with tokenfeed.DatasetWriter(tmp_path / "train", token_dtype="uint16", write_mask=False) as w:
        for k in range(8):
            w.add([1 + k, 2, 3])
    tokenfeed.write_dataset_metadata(tmp_path, token_dtype="uint16", mask_dtype=None, eot_token_id=PAD,
                                     vocab_size=150)
    loader = tokenfeed.RLLoader({"dataset_dir": str(tmp_path), "audit_log_dir": ""}, toy_group, group_size=GROUP,
                                batch_size=4, block_size=24)
    assert loader.vocab_size == 150
    with pytest.raises(tokenfeed.UsageError, match=r"token id 2\d\d at position 0, outside the vocabulary \[0, 150\)"):
        next(loader)  # toy completions start with 200 + k


@pytest.mark.parametrize("name,value", [("group_size", 0), ("group_size", -1), ("group_size", 1),
                                        ("batch_size", -1), ("block_size", 0), ("max_attempts", 0),
                                        ("prefetch_groups", -1), ("prefetch_groups", 10**9), ("vocab_size", 0),
                                        ("group_size", 2.5)])
def test_arguments_out_of_range_are_config_errors_at_construction(prompts_dir, name, value):
    with pytest.raises(tokenfeed.ConfigError, match=f"RLLoader: {name} must be an integer .*, got {value!r}"):
        make_loader(prompts_dir, **{name: value})


def test_tokens_is_refused_not_taken_for_completions(prompts_dir):
    class SpecGroup:  # the spec's ScoredGroup: whole sequences with prompt_len
        def __init__(self, p):
            self.tokens = [np.concatenate([p, [200 + k, 150]]) for k in range(GROUP)]
            self.rewards, self.prompt_len, self.log_probs = [0.0, 1.0, 2.0, 0.0], len(p), None

    for sampler in (lambda p: {"tokens": [[200 + k, 150] for k in range(GROUP)], "rewards": [0, 1, 2, 0]},
                    SpecGroup):
        with pytest.raises(tokenfeed.UsageError, match="'tokens' without 'completions'.*prompt included"):
            next(make_loader(prompts_dir, sampler))


def test_max_attempts_prints_eps_exactly_and_skip_failed_prompts_goes_on(prompts_dir):
    flat_from = {}

    def sampler(p):  # pull indices 2..6 (counted by call order) give flat rewards
        n = flat_from.setdefault("calls", 0)
        flat_from["calls"] = n + 1
        return toy_group(p, flat=lambda q: 2 <= n <= 6)

    loader = make_loader(prompts_dir, sampler, max_attempts=4, eps=1e-9)
    state = loader.state_dict()
    with pytest.raises(tokenfeed.PipelineError, match=r"eps = 1e-09\).*skip_failed_prompts"):
        while True:
            next(loader)
    flat_from["calls"] = 0
    again = make_loader(prompts_dir, sampler, max_attempts=4, eps=1e-9, skip_failed_prompts=True)
    again.load_state_dict(state)
    ids = set()
    for _ in range(3):
        ids |= set(next(again).group_ids.tolist())
    assert not ids & {2, 3, 4, 5, 6} and 7 in ids
    assert again.metrics()["total"]["failed_runs"] == 1
    assert again.state_dict()["batcher"]["metrics"]["failed_runs"] == 1


def test_rewards_float32_cannot_hold_are_refused(prompts_dir):
    def with_rewards(rewards):
        def sampler(p):
            g = toy_group(p)
            g.rewards = rewards
            return g
        return sampler

    with pytest.raises(tokenfeed.UsageError, match=r"reward 0 \(1\.5e\+308\) is not finite in float32"):
        next(make_loader(prompts_dir, with_rewards([1.5e308, 1.5e308, -1e308, 0])))
    with pytest.raises(tokenfeed.UsageError, match=r"reward 1 \(1e\+39\) is not finite in float32"):
        next(make_loader(prompts_dir, with_rewards([0, 1e39, 0, 0])))
    with pytest.raises(tokenfeed.UsageError, match=r"reward 0 \(1e\+300\) is not finite in float32"):
        next(make_loader(prompts_dir, with_rewards([1e300, -1e300, 0, 0]), advantage="mean_only"))
    with pytest.raises(tokenfeed.UsageError, match=r"advantage of completion 3 .* not finite in float32"):
        next(make_loader(prompts_dir, with_rewards([3e38, 3e38, 3e38, -3e38]), advantage="mean_only"))


def test_ctrl_c_with_a_hung_prefetching_sampler_is_prompt(prompts_dir):
    import _thread
    import time
    release = threading.Event()

    def hung(p):
        release.wait(10)  # long past the interrupt; short enough that a lost one fails in seconds
        return toy_group(p)

    loader = make_loader(prompts_dir, hung, prefetch_groups=2)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    start = time.monotonic()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        next(loader)
    assert time.monotonic() - start < 2.0  # the interrupt at 0.3 s, within the loader's ~50 ms
    release.set()
    # the abandoned thread ends; the loader goes on from where it was
    assert next(make_loader(prompts_dir)).num_sequences > 0
    loader.close()


@pytest.mark.parametrize("close", [False, True])
def test_interpreter_exit_with_a_prefetching_loader_is_clean(prompts_dir, close):
    root, _ = prompts_dir
    script = f"""
import numpy as np, tokenfeed
def sample(p):
    return tokenfeed.ScoredGroup([[200, 150], [201], [202, 3], [203]], [0.0, 1.0, 2.0, 0.5])
loader = tokenfeed.RLLoader({{"dataset_dir": {str(root)!r}, "audit_log_dir": ""}}, sample, group_size=4,
                            batch_size=4, block_size=24, prefetch_groups=tokenfeed.rl.MAX_PREFETCH_GROUPS)
batch = next(loader)
{"loader.close()" if close else ""}
print("ok", flush=True)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
    assert "terminate" not in result.stderr and "leaked" not in result.stderr, result.stderr


def test_a_state_is_refused_by_a_copy_of_the_prompts_with_one_token_changed(prompts_dir, tmp_path):
    import shutil
    root, _ = prompts_dir
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    [tokens] = sorted((copy / "train").rglob("tokens.bin"))[:1]
    data = bytearray(tokens.read_bytes())
    data[4] ^= 1  # same lengths, one prompt token differs
    tokens.write_bytes(bytes(data))
    loader = make_loader(prompts_dir)
    next(loader)
    state = loader.state_dict()
    other = tokenfeed.RLLoader({"dataset_dir": str(copy), "audit_log_dir": ""}, toy_group, group_size=GROUP,
                               batch_size=4, block_size=24)
    with pytest.raises(tokenfeed.StateError, match="another prompt dataset or order"):
        other.load_state_dict(state)
    make_loader(prompts_dir).load_state_dict(state)  # the original still takes it


def test_a_shape_schedule_shapes_each_batch_and_resumes_exactly(prompts_dir):
    root, _ = prompts_dir
    # Batches 0-1: 4 rows of 12 positions (a group's 4 sequences fit any batch); then
    # batch_size 3 rows of 30.
    config = {"dataset_dir": str(root), "audit_log_dir": "",
              "shape_schedule": [{"until_step": 2, "global_batch_size": 4, "block_size": 12}, {"block_size": 30}]}

    def loader():
        return tokenfeed.RLLoader(config, toy_group, group_size=GROUP, batch_size=3, block_size=20)

    first = loader()
    straight, states, groups = [], [], []
    for step in range(6):
        states.append(first.state_dict())
        batch = next(first)
        assert batch.tokens.shape == ((4, 12) if step < 2 else (3, 30))
        ids = sorted(set(int(g) for g in batch.group_ids if g >= 0))
        assert not groups or ids[0] > groups[-1]  # whole groups, in pull order
        groups.extend(ids)
        straight.append(copy_of(batch))
    assert groups == list(range(groups[-1] + 1))  # toy_group's rewards always vary: none dropped
    for at in (1, 2, 3):
        resumed = loader()
        resumed.load_state_dict(states[at])
        for step in range(at, 6):
            assert same(copy_of(next(resumed)), straight[step]), step
