"""A batch's arrays are the loader's own buffers: no copy into numpy, none into torch."""
import ctypes
import time

import numpy as np
import pytest

import tokenfeed
from conftest import base_keys, require_torch

FIELDS = ["x", "y", "mask", "tokens", "labels", "token_weights", "position_ids", "cu_seqlens", "episode_ids"]


def pointer(a):
    return a.__array_interface__["data"][0]


def test_fields_are_stable_views(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True))
    batch = loader.get_batch()
    for name in FIELDS:
        a = getattr(batch, name)
        assert getattr(batch, name) is a, name  # made once, then the same array
        assert a.flags.c_contiguous and a.flags.writeable
        assert not a.flags.owndata and a.base is not None, name  # a view of memory numpy did not allocate
    assert batch.x.shape == batch.y.shape == batch.mask.shape == (4, 64)
    assert batch.x.dtype == np.int64 and batch.mask.dtype == np.float32 and batch.position_ids.dtype == np.int32
    # x and tokens are one buffer; the episode mode's y (raw next tokens) is not labels.
    assert np.shares_memory(batch.x, batch.tokens)
    assert not np.shares_memory(batch.y, batch.labels)
    # The arrays dict hands out the same views.
    arrays = batch.arrays()
    for name, a in arrays.items():
        assert pointer(a) == pointer(getattr(batch, name)), name


@pytest.mark.parametrize("mode, field", [("sft_episode", "x"), ("sft_episode", "mask"), ("sft_packed", "labels"),
                                         ("sft_packed", "segments")])
def test_the_loader_fills_the_memory_the_array_views(sft_dir, mode, field):
    # With one decode thread and a prefetch depth of 1, a released batch's buffers go back
    # to the pool and the pipeline fills them with a later batch. Before each get_batch,
    # read the raw memory at the address of the previous batch's field (that batch is
    # released by then): whenever the new batch's field views that same address, the memory
    # already held the new batch's values before get_batch was called - the background
    # stage wrote them there, and get_batch only handed the memory over. A copying
    # implementation fails: its copy is made inside get_batch, so the memory read before
    # the call holds the previous batch's values (or freed bytes).
    loader = tokenfeed.Loader(base_keys(sft_dir, dataset_mode=mode, use_loss_mask=True, prefetch_depth=1,
                                        decode_threads=1))
    batch = loader.get_batch()
    a = getattr(batch, field)
    address, nbytes = pointer(a), a.nbytes
    assert nbytes > 0
    del batch, a  # the views go with it: the buffers are back in the pool
    same_address = matches = 0
    steps = []
    while same_address < 12 and len(steps) < 200:  # how often a buffer comes straight back varies
        time.sleep(0.02)  # the pipeline prepares the next batch
        before = ctypes.string_at(address, nbytes)
        batch = loader.get_batch()
        a = getattr(batch, field)
        steps.append(batch.step)
        if pointer(a) == address:
            same_address += 1
            n = min(nbytes, a.nbytes)
            matches += before[:n] == a.tobytes()[:n]
        address, nbytes = pointer(a), a.nbytes
        del batch, a
    assert steps == list(range(1, len(steps) + 1))
    assert same_address == 12, (same_address, len(steps))  # the pool hands the same buffers out again
    # Allow a rare late decode on a loaded machine; a copy would match (almost) never.
    assert matches >= same_address - 2, (matches, same_address)


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
    loader = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=False))  # mask off, not document-aware, not packed
    batch = loader.get_batch()
    assert batch.mask.size == 0 and batch.mask.dtype == np.float32
    assert batch.doc_ids.size == 0 and batch.doc_ids.dtype == np.int32
    assert batch.segments.shape == (0,) and batch.segments.dtype.names == ("row", "column", "positions", "episode")
    assert "mask" not in batch.arrays() and "doc_ids" not in batch.arrays() and "segments" not in batch.arrays()


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


def test_a_contract_read_late_is_the_one_a_decoder_writes(sft_dir):
    # sft_episode writes labels, position_ids and cu_seqlens only once the trainer reads one:
    # a trainer of the episode view for a while, then of the contract, gets the same batches
    # as one that reads the contract from the start.
    keys = dict(base_keys(sft_dir, use_loss_mask=True), prefetch_depth=4, epoch_drop_last=False)
    at_once, late = tokenfeed.Loader(keys), tokenfeed.Loader(keys)
    names = ("x", "y", "mask", "labels", "token_weights", "position_ids", "cu_seqlens")
    for step in range(12):
        a, b = at_once.get_batch(), late.get_batch()
        expected = {n: getattr(a, n).copy() for n in names}
        if step < 6:
            b.x, b.y, b.mask
        else:
            for n in names:
                np.testing.assert_array_equal(getattr(b, n), expected[n], err_msg=f"{n} at step {step}")
            np.testing.assert_array_equal(b.labels, np.where(b.mask != 0, b.y, -100))
        a.release()
        b.release()


def test_torch_from_dlpack_is_zero_copy(sft_dir):
    torch = require_torch()
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
    torch = require_torch()
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


def test_segments_are_the_packed_records_without_a_copy(sft_dir):
    loader = tokenfeed.Loader(base_keys(sft_dir, dataset_mode="sft_packed", use_loss_mask=True))
    batch = loader.get_batch()
    s = batch.segments
    assert s.dtype.names == ("row", "column", "positions", "episode")
    assert [s.dtype[f] for f in s.dtype.names] == [np.uint32, np.uint32, np.uint32, np.int64]
    assert s.ndim == 1 and len(s) >= batch.rows and not s.flags.owndata
    assert batch.segments is s and batch.arrays()["segments"] is s  # packed mode: in arrays() too
    # The records describe the batch's rows: positions add up to the real positions, and
    # position_ids restart at 0 at each segment's column.
    assert int(s["positions"].sum()) == batch.real_positions
    for row, column, positions, episode in s.tolist():
        np.testing.assert_array_equal(batch.position_ids[row, column:column + positions], np.arange(positions))
        assert 0 <= episode < loader.num_episodes()


def test_to_torch_copy_for_gradient_accumulation(sft_dir):
    # Autograd keeps a micro-batch's input tensors until backward(); zero-copy tensors keep
    # their batch held, so the (MAX_HELD_BATCHES + 1)-th micro-batch's get_batch fails.
    # to_torch(copy=True) gives tensors of their own: the batch is released at once.
    torch = require_torch()
    import gc

    loader = tokenfeed.Loader(base_keys(sft_dir, use_loss_mask=True, prefetch_depth=2, decode_threads=1))
    emb = torch.nn.Embedding(300, 8)

    def micro_loss(t):
        return (emb(t["tokens"]).sum(-1) * t["token_weights"]).sum()

    losses = []
    with pytest.raises(tokenfeed.UsageError, match="holds"):
        for _ in range(tokenfeed.MAX_HELD_BATCHES + 1):
            losses.append(micro_loss(loader.get_batch().to_torch(["tokens", "token_weights"])))
    assert len(losses) == tokenfeed.MAX_HELD_BATCHES
    del losses
    gc.collect()

    expected, kept, losses = [], [], []
    for _ in range(3 * tokenfeed.MAX_HELD_BATCHES):
        batch = loader.get_batch()
        t = batch.to_torch(["tokens", "token_weights"], copy=True)
        assert t["tokens"].data_ptr() != batch.tokens.ctypes.data  # its own memory
        expected.append(batch.tokens.copy())
        kept.append(t["tokens"])
        del batch
        losses.append(micro_loss(t))
    torch.stack(losses).sum().backward()
    assert emb.weight.grad is not None and emb.weight.grad.abs().sum() > 0
    # The copies kept their values while the loader reused the buffers they came from.
    for tensor, values in zip(kept, expected):
        np.testing.assert_array_equal(tensor.numpy(), values)
    single = np.arange(3)
    copied = tokenfeed.to_torch(single, copy=True)
    single[0] = 7
    assert copied.tolist() == [0, 1, 2]
    with pytest.raises(tokenfeed.UsageError, match="structured"):
        tokenfeed.Loader(base_keys(sft_dir, dataset_mode="sft_packed")).get_batch().to_torch(["segments"])
    packed = tokenfeed.Loader(base_keys(sft_dir, dataset_mode="sft_packed")).get_batch()
    assert "segments" in packed.arrays() and "segments" not in packed.to_torch()
