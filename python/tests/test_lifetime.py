"""A batch's memory lives as long as Python holds the batch or any array from it, even past
the loader; it returns to the pool when the last of them is released."""
import gc

import numpy as np
import pytest

import tokenfeed
from conftest import base_keys


def test_batch_outlives_the_loader(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True))
    batch = loader.get_batch()
    expected = {k: v.copy() for k, v in batch.arrays().items()}
    del loader
    gc.collect()
    # Allocate and touch memory that would reuse freed buffers.
    junk = [np.full(4 * 64, 99, dtype=np.int64) for _ in range(200)]
    for name, value in expected.items():
        np.testing.assert_array_equal(getattr(batch, name), value, err_msg=name)
    assert batch.split == "train" and batch.step == 0
    del junk


def test_array_outlives_batch_and_loader(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))
    batch = loader.get_batch()
    x = batch.x
    expected = x.copy()
    del batch, loader
    gc.collect()
    np.testing.assert_array_equal(x, expected)


def test_released_batches_return_to_the_pool(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir, prefetch_depth=1, decode_threads=1))
    held = [loader.get_batch() for _ in range(tokenfeed.MAX_HELD_BATCHES)]
    with pytest.raises(tokenfeed.UsageError, match="holds"):
        loader.get_batch()
    # An array keeps its batch held, even once the Batch object is gone.
    x = held[0].x
    del held[0]
    gc.collect()
    with pytest.raises(tokenfeed.UsageError):
        loader.get_batch()
    # Dropping the last reference returns the buffers at once (no garbage collection needed).
    del x
    b = loader.get_batch()
    assert b.valid
    # release() drops the batch's own hold; views made before keep the memory alive.
    y = held[1].y
    held[1].release()
    assert not held[1].valid
    with pytest.raises(tokenfeed.UsageError, match="released"):
        held[1].x
    assert y.shape == (4, 64)
    del y, held
    for _ in range(20):
        loader.get_batch()


def test_iteration_holds_one_batch_at_a_time(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir, prefetch_depth=1, decode_threads=1))
    steps = [batch.step for batch in loader.iter("train", steps=50)]
    assert steps == list(range(50))


def test_close_keeps_handed_out_batches(sft_dir):
    with tokenfeed.Loader(base_keys(sft_dir)) as loader:
        batch = loader.get_batch()
        expected = batch.x.copy()
    assert loader.closed
    with pytest.raises(tokenfeed.UsageError, match="closed"):
        loader.get_batch()
    np.testing.assert_array_equal(batch.x, expected)
