"""A batch's arrays are the loader's own buffers: no copy into numpy, none into torch."""
import numpy as np
import pytest

import tokenfeed
from conftest import base_keys

FIELDS = ["x", "y", "mask", "tokens", "labels", "token_weights", "position_ids", "cu_seqlens", "episode_ids"]


def pointer(a):
    return a.__array_interface__["data"][0]


def test_fields_are_stable_views(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True))
    batch = loader.get_batch()
    for name in FIELDS:
        a = getattr(batch, name)
        assert pointer(a) == pointer(getattr(batch, name)), name  # same memory on every access
        assert a.flags.c_contiguous and a.flags.writeable
        assert a.ctypes.data == pointer(a)
    assert batch.x.shape == batch.y.shape == batch.mask.shape == (4, 64)
    assert batch.x.dtype == np.int64 and batch.mask.dtype == np.float32 and batch.position_ids.dtype == np.int32
    # x and tokens are one buffer; the episode mode's y (raw next tokens) is not labels.
    assert np.shares_memory(batch.x, batch.tokens)
    assert not np.shares_memory(batch.y, batch.labels)
    # The arrays dict hands out the same views.
    arrays = batch.arrays()
    for name, a in arrays.items():
        assert pointer(a) == pointer(getattr(batch, name)), name


def test_views_of_one_buffer_see_each_others_writes(sft_dir):
    # In sft_packed, y is labels and mask is token_weights: separate numpy arrays made from
    # the same C++ buffer. A write through one is seen through the other only when neither
    # is a copy.
    loader = tokenfeed.Loader(base_keys(sft_dir, dataset_mode="sft_packed", use_loss_mask=True))
    batch = loader.get_batch()
    assert batch.y is not batch.labels
    assert pointer(batch.y) == pointer(batch.labels)
    assert np.shares_memory(batch.y, batch.labels) and np.shares_memory(batch.mask, batch.token_weights)
    batch.labels[1, 2] = 424242
    assert batch.y[1, 2] == 424242
    batch.token_weights[0, 0] = 0.25
    assert batch.mask[0, 0] == 0.25


def test_buffers_cycle_through_the_pool(sft_dir):
    # Released batches come back: a long run reuses a handful of buffers (the pool), while
    # batches alive at the same time never share memory.
    loader = tokenfeed.Loader(base_keys(sft_dir, prefetch_depth=1, decode_threads=1))
    seen = set()
    for _ in range(60):
        seen.add(pointer(loader.get_batch().x))
    assert len(seen) <= 2 * (1 + tokenfeed.MAX_HELD_BATCHES)  # a handful of buffers for 60 batches
    held = [loader.get_batch() for _ in range(tokenfeed.MAX_HELD_BATCHES)]
    assert len({pointer(b.x) for b in held}) == len(held)
    for a in held:
        for b in held:
            if a is not b:
                assert not np.shares_memory(a.x, b.x)


def test_empty_fields_are_empty_arrays(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir))  # mask off, not document-aware, not packed
    batch = loader.get_batch()
    assert batch.mask.size == 0 and batch.mask.dtype == np.float32
    assert batch.doc_ids.size == 0 and batch.doc_ids.dtype == np.int32
    assert batch.segments.shape == (0, 4)
    assert "mask" not in batch.arrays() and "doc_ids" not in batch.arrays()


def test_without_contract_fields_only_the_episode_view_is_filled(sft_dir):
    keys = dict(base_keys(sft_dir), use_loss_mask=True)
    full = tokenfeed.Loader(keys).get_batch()
    view = tokenfeed.Loader(dict(keys, contract_fields=False)).get_batch()
    for name in ("x", "y", "mask", "episode_ids"):
        np.testing.assert_array_equal(getattr(view, name), getattr(full, name))
    for name in ("labels", "token_weights", "position_ids", "cu_seqlens"):
        assert getattr(view, name).size == 0
        assert name not in view.arrays()
    assert view.num_sequences == 0
    assert np.shares_memory(full.mask, full.token_weights)  # equal in sft_episode: written once


def test_torch_from_dlpack_is_zero_copy(sft_dir):
    torch = pytest.importorskip("torch")
    loader = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True))
    batch = loader.get_batch()
    x = batch.x
    t = torch.from_dlpack(x)
    assert t.data_ptr() == x.ctypes.data
    assert t.dtype == torch.int64 and tuple(t.shape) == x.shape
    m = torch.from_dlpack(batch.mask)
    assert m.data_ptr() == batch.mask.ctypes.data and m.dtype == torch.float32
    tensors = batch.to_torch()
    for name, tensor in tensors.items():
        assert tensor.data_ptr() == getattr(batch, name).ctypes.data, name
    assert tokenfeed.to_torch(batch.labels).data_ptr() == batch.labels.ctypes.data
    # The tensor is the batch's memory: a write through torch shows in numpy.
    t[0, 0] = -7
    assert batch.x[0, 0] == -7
    with pytest.raises(tokenfeed.UsageError):
        batch.to_torch(["doc_ids"])  # empty here


def test_tensor_keeps_the_batch_alive(sft_dir):
    torch = pytest.importorskip("torch")
    import gc

    loader = tokenfeed.Loader(base_keys(sft_dir, prefetch_depth=1, decode_threads=1))
    batch = loader.get_batch()
    expected = batch.x.copy()
    t = torch.from_dlpack(batch.x)
    del batch
    gc.collect()
    for _ in range(10):  # the pool cycles; the tensor's buffer must not be reused
        loader.get_batch()
    assert np.array_equal(t.numpy(), expected)
