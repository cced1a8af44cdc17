"""The `fields` key: a trainer names the fields it reads, gets exactly those (the values a
loader of every field gives), and a clear error for any other."""
import numpy as np
import pytest

import tokenfeed
from conftest import base_keys, require_torch

VIEW = ["x", "y", "mask"]
CONTRACT = ["tokens", "labels", "token_weights", "position_ids", "cu_seqlens"]


@pytest.mark.parametrize("chosen", [VIEW, CONTRACT, ["x", "labels"]])
def test_the_chosen_fields_are_those_of_a_loader_of_every_field(sft_dir, chosen):
    every = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True))
    some = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True), fields=chosen)
    assert some.config["fields"] == ",".join(chosen)
    for _ in range(5):
        whole, part = every.get_batch(), some.get_batch()
        for name in chosen:
            np.testing.assert_array_equal(getattr(part, name), getattr(whole, name), err_msg=name)
        expected = set(chosen) | {"episode_ids"} | ({"cu_seqlens_padded"} if "cu_seqlens" in chosen else set())
        assert set(part.arrays()) == expected


def test_a_field_not_chosen_raises_naming_it(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True, fields="x,y"))
    batch = loader.get_batch()
    assert batch.x.shape == (4, 64)
    with pytest.raises(tokenfeed.UsageError, match=r"batch field 'labels' .* config key 'fields' is 'x,y'"):
        batch.labels
    # The counts go with cu_seqlens, and are refused naming it.
    named = {"num_sequences": "cu_seqlens", "max_seqlen": "cu_seqlens"}
    for name in ["tokens", "mask", "token_weights", "position_ids", "cu_seqlens", "num_sequences", "max_seqlen"]:
        with pytest.raises(tokenfeed.UsageError, match=f"batch field '{named.get(name, name)}'"):
            getattr(batch, name)


def test_a_bad_fields_value_is_a_config_error(sft_dir):
    with pytest.raises(tokenfeed.ConfigError, match=r"unknown field 'logits'"):
        tokenfeed.Loader(base_keys(sft_dir), fields=["x", "logits"])
    with pytest.raises(tokenfeed.ConfigError, match=r"expected a list of str"):
        tokenfeed.Loader(base_keys(sft_dir), fields=["x", 3])


def test_labels_read_after_x_was_changed_are_the_decoders(sft_dir):
    # A trainer that adds noise to x in place and only then reads labels gets the labels of
    # the data, not labels derived from its noise.
    every = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True))
    noisy = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True))
    for step in range(8):
        batch = noisy.get_batch()
        batch.x[:] = 7
        expected = every.get_batch().labels
        if step >= 4:
            np.testing.assert_array_equal(batch.labels, expected)


def test_to_torch_gives_the_chosen_fields(sft_dir):
    require_torch()
    loader = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True), fields=VIEW)
    batch = loader.get_batch()
    assert set(batch.to_torch()) == set(VIEW) | {"episode_ids"}
    with pytest.raises(tokenfeed.UsageError, match="'labels'"):
        batch.to_torch(["labels"])
