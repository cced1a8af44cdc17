"""Hostile input through the Python module: deeply nested JSON states and metadata, and
unreachable resume positions, end in tokenfeed's errors, never a crashed interpreter."""
import json

import pytest

import tokenfeed
from conftest import base_keys

DEEP = 200_000


def test_deeply_nested_state_text_is_an_error(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    text = '{"format":"tokenfeed-state","version":' + "[" * DEEP + "]" * DEEP + "}"
    with pytest.raises(tokenfeed.StateError, match="nesting deeper than 64"):
        loader.load_state_dict(text)


def test_deeply_nested_state_dict_is_an_error(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    nested = []
    for _ in range(DEEP):
        nested = [nested]
    with pytest.raises((tokenfeed.Error, RecursionError)):
        loader.load_state_dict({"format": "tokenfeed-state", "version": nested})


def test_unreachable_step_is_refused(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    state = loader.state_dict()
    state["splits"]["train"]["step"] = 2**64 - 1
    with pytest.raises(tokenfeed.StateError, match="step="):
        loader.load_state_dict(state)


def test_deeply_nested_metadata_is_an_error(tmp_path):
    (tmp_path / "train").mkdir()
    (tmp_path / "dataset_metadata.json").write_text('{"eot_token_id":' + "[" * DEEP + "]" * DEEP + "}")
    with pytest.raises(tokenfeed.Error, match="nesting deeper than 64"):
        tokenfeed.Loader(base_keys(tmp_path))


def test_state_text_round_trips_as_json(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    assert json.loads(json.dumps(loader.state_dict()))["format"] == "tokenfeed-state"
