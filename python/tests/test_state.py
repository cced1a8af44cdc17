"""state_dict()/load_state_dict(): a plain dict that resumes exactly, survives torch.save,
and refuses another dataset or sampling config."""
import json
import pickle

import numpy as np
import pytest

import tokenfeed
from conftest import base_keys, require_torch


def take(loader, n, split="train"):
    return [(b.step, b.x.copy(), b.y.copy(), b.episode_ids.copy()) for b in loader.iter(split, steps=n)]


def assert_same(a, b):
    assert [s for s, *_ in a] == [s for s, *_ in b]
    for (_, x1, y1, e1), (_, x2, y2, e2) in zip(a, b):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
        np.testing.assert_array_equal(e1, e2)


@pytest.mark.parametrize("extra", [{}, {"batch_sampling_mode": "random"}, {"dataset_mode": "sft_packed"}])
def test_round_trip(sft_dir, extra):
    keys = base_keys(sft_dir, use_loss_mask=True, **extra)
    a = tokenfeed.Loader(keys)
    batches_per_epoch = a.batches_per_epoch() or 50
    take(a, batches_per_epoch + 3, "train")  # across an epoch boundary
    take(a, 2, "val")
    state = a.state_dict()
    assert isinstance(state, dict)
    assert state["splits"]["train"]["step"] == batches_per_epoch + 3
    assert json.loads(json.dumps(state)) == state and pickle.loads(pickle.dumps(state)) == state
    expected_train, expected_val = take(a, 6, "train"), take(a, 3, "val")

    b = tokenfeed.Loader(keys)
    take(b, 1)  # a loader that already moved is moved back
    b.load_state_dict(state)
    assert_same(take(b, 6, "train"), expected_train)
    assert_same(take(b, 3, "val"), expected_val)

    c = tokenfeed.Loader(keys)
    c.load_state(a.save_state())  # the JSON text works too
    assert c.state_dict() == a.state_dict()


def test_survives_torch_save(sft_dir, tmp_path):
    torch = require_torch()
    keys = base_keys(sft_dir)
    a = tokenfeed.Loader(keys)
    take(a, 5)
    torch.save({"model": {}, "loader": a.state_dict()}, tmp_path / "ckpt.pt")
    expected = take(a, 4)
    checkpoint = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    b = tokenfeed.Loader(keys)
    b.load_state_dict(checkpoint["loader"])
    assert_same(take(b, 4), expected)


def test_refuses_another_config(sft_dir):
    a = tokenfeed.Loader(base_keys(sft_dir))
    take(a, 3)
    state = a.state_dict()
    other = tokenfeed.Loader(base_keys(sft_dir, batch_size=5))
    with pytest.raises(tokenfeed.StateError, match="fingerprint") as e:
        other.load_state_dict(state)
    assert isinstance(e.value, ValueError) and isinstance(e.value, tokenfeed.Error)
    with pytest.raises(tokenfeed.StateError):
        other.load_state_dict({"format": "tokenfeed-state"})
    with pytest.raises(tokenfeed.StateError):
        other.load_state_dict("not json")
    with pytest.raises(tokenfeed.StateError):
        other.load_state_dict(42)
    # A refused state leaves the loader where it was.
    assert other.state_dict()["splits"]["train"]["step"] == 0
