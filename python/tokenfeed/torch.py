"""Model parallelism over ``torch.distributed``: the data-parallel groups of a loader's
parallel layout, and a group leader's batches handed to the rest of its group.

Under tensor, context or pipeline parallelism every rank of one data-parallel group (the
ranks that share a data-parallel rank) trains on the same batch. With the default
``data_loading="every_rank"`` each of them decodes it itself, with no communication. With
``data_loading="group_leader"`` only the group's leader (its lowest global rank) runs a
pipeline; :func:`broadcast_batch` takes the next batch there and broadcasts it to the
group::

    import torch.distributed as dist, tokenfeed, tokenfeed.torch as tft

    dist.init_process_group("nccl")
    loader = tokenfeed.Loader("train.xml", tensor_parallel_size=8, data_loading="group_leader")
    group = tft.data_parallel_group(loader)          # every rank calls it, in the same order
    for step in range(steps):
        batch = tft.broadcast_batch(loader, group, device="cuda")
        logits = model(batch["tokens"])               # the same tensors on every rank of the group

The loader's rules are the C++ core's (``Loader.parallel_layout``, ``data_parallel_groups``);
this module only moves tensors. torch is imported when a function is called.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from ._tokenfeed import Loader, UsageError

# Every array a batch may have, in the order the header lists them, with its dtype and its
# rank (2: rows x cols; 1: a vector; segments: its records as (n, 4) int64).
_FIELDS = (
    ("x", np.int64), ("y", np.int64), ("mask", np.float32), ("tokens", np.int64), ("labels", np.int64),
    ("token_weights", np.float32), ("position_ids", np.int32), ("cu_seqlens", np.int32),
    ("cu_seqlens_padded", np.int32), ("episode_ids", np.int64), ("doc_ids", np.int32), ("source_ids", np.int32),
    ("segments", np.int64), ("log_probs", np.float32), ("rewards", np.float32), ("group_ids", np.int64),
)
_GRID = {"x", "y", "mask", "tokens", "labels", "token_weights", "position_ids", "doc_ids", "log_probs"}
_BOOKKEEPING = ("step", "epoch", "batch_in_epoch", "rows", "cols", "real_rows", "real_positions", "num_sequences",
                "max_seqlen", "has_mask")
_ABSENT = -1  # a field code: the batch has no such field; >= 0: its element count;
# <= -2: the same memory as field -(code + 2) (x and tokens, y and labels share it)


@dataclass
class GroupBatch:
    """A batch as every rank of a data-parallel group receives it from its leader: the
    batch's arrays as torch tensors (``tensors``, also by ``batch["tokens"]``; fields that
    share memory in the loader's batch are one tensor here too), views of one buffer that
    every rank of the group holds alike, and its bookkeeping."""

    split: str
    step: int
    epoch: int
    batch_in_epoch: int
    rows: int
    cols: int
    real_rows: int
    real_positions: int
    num_sequences: int
    max_seqlen: int
    has_mask: bool
    tensors: dict = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.tensors[name]

    def __contains__(self, name: str) -> bool:
        return name in self.tensors


def data_parallel_group(loader: Loader, backend: Optional[str] = None) -> Any:
    """This rank's data-parallel group (the ranks that get the same batches) as a
    ``torch.distributed`` process group. Every rank must call it, in the same order relative
    to its other ``new_group`` calls: it creates one group per data-parallel rank, as
    ``torch.distributed.new_group`` requires. Raises ``UsageError`` when the loader's layout
    does not give the groups (``data_parallel_rank``/``size`` given directly for another
    layout: make the group from that layout, e.g. a DeviceMesh's)."""
    import torch.distributed as dist

    groups = loader.data_parallel_groups()
    if not groups:
        raise UsageError("data_parallel_group: the loader's data-parallel coordinates were given directly "
                         "(data_parallel_rank/data_parallel_size), so its layout does not give the groups; pass "
                         "the group of your own layout to broadcast_batch")
    mine = loader.parallel_layout["data_parallel_rank"]
    out = None
    for dp_rank, ranks in enumerate(groups):
        group = dist.new_group(ranks=ranks, backend=backend)
        if dp_rank == mine:
            out = group
    return out


def broadcast_batch(loader: Loader, group: Any, split: str = "train", device: Any = None) -> GroupBatch:
    """The next batch of ``split`` on every rank of ``group``, this rank's data-parallel
    group: its leader (``loader.parallel_layout["leader_rank"]``) takes it from its loader
    and broadcasts it; the other ranks receive it and never touch their loaders' pipelines
    (with ``data_loading="group_leader"`` they have none). Every rank of the group must call
    it once per step. Two collectives per batch: a small header (the bookkeeping and each
    field's size), then every field in one buffer, of which the returned tensors are views
    on every rank (the leader's batch is released at once). ``device``: where the buffer
    lives and is broadcast from (a CUDA device for NCCL; None keeps it on the CPU, for
    gloo). The leader's state is every rank's: save ``state_dict()`` on a leader (rank 0 is
    one)."""
    import torch
    import torch.distributed as dist

    layout = loader.parallel_layout
    src = int(layout["leader_rank"])
    if src < 0:
        raise UsageError("broadcast_batch: the loader's layout does not tell its group's leader "
                         "(data_parallel_rank/data_parallel_size given directly for another layout)")
    if layout["data_leader"]:
        batch = loader.get_batch(split)
        header, payload = _pack(batch)
        batch.release()
        header_t = torch.tensor(header, dtype=torch.int64, device=device)
        dist.broadcast(header_t, src=src, group=group)
        payload_t = torch.from_numpy(payload)
        if device is not None:
            payload_t = payload_t.to(device)
    else:
        header_t = torch.empty(len(_BOOKKEEPING) + len(_FIELDS), dtype=torch.int64, device=device)
        dist.broadcast(header_t, src=src, group=group)
        header = [int(v) for v in header_t.tolist()]
        payload_t = torch.empty(_layout(header)[1], dtype=torch.uint8, device=device)
    dist.broadcast(payload_t, src=src, group=group)
    values = dict(zip(_BOOKKEEPING, header[:len(_BOOKKEEPING)]))
    values["has_mask"] = bool(values["has_mask"])
    return GroupBatch(split=split, tensors=_unpack(header, payload_t), **values)


def _shape(name: str, count: int, rows: int, cols: int) -> tuple:
    return (rows, cols) if name in _GRID else (count // 4, 4) if name == "segments" else (count,)


def _layout(header: list) -> tuple:
    """Each sent field's byte offset in the buffer (8-byte aligned, so that every field can
    be viewed in place), and the buffer's size."""
    offsets, at = {}, 0
    for (name, dtype), code in zip(_FIELDS, header[len(_BOOKKEEPING):]):
        if code >= 0:
            offsets[name] = at
            at += -(-code * np.dtype(dtype).itemsize // 8) * 8
    return offsets, at


def _pack(batch: Any) -> tuple:
    """The header and the one buffer a leader broadcasts."""
    header, arrays = _describe(batch)
    offsets, size = _layout(header)
    payload = np.zeros(size, dtype=np.uint8)
    for name, at in offsets.items():
        a = np.ascontiguousarray(arrays[name]).reshape(-1).view(np.uint8)
        payload[at:at + a.size] = a
    return header, payload


def _unpack(header: list, payload: Any) -> dict:
    """The fields as views of the received buffer; a field that shares another's memory in
    the loader's batch is that field's tensor."""
    import torch

    offsets, _ = _layout(header)
    rows, cols = header[3], header[4]
    tensors = {}
    for (name, dtype), code in zip(_FIELDS, header[len(_BOOKKEEPING):]):
        if code >= 0:
            dt = np.dtype(dtype)
            raw = payload[offsets[name]:offsets[name] + code * dt.itemsize]
            tensors[name] = raw.view(getattr(torch, dt.name)).reshape(_shape(name, code, rows, cols))
        elif code <= -2:
            tensors[name] = tensors[_FIELDS[-(code + 2)][0]]
    return tensors


def _describe(batch: Any) -> tuple:
    """The header a leader broadcasts first (bookkeeping, then each field's code) and the
    arrays it then sends, segments as (n, 4) int64 records."""
    arrays = batch.arrays()
    if "segments" in arrays:
        s = arrays["segments"]
        arrays["segments"] = np.stack([s["row"], s["column"], s["positions"], s["episode"]], axis=1).astype(np.int64)
    header = [batch.step, batch.epoch, batch.batch_in_epoch, batch.rows, batch.cols, batch.real_rows,
              batch.real_positions, batch.num_sequences, batch.max_seqlen, int(batch.has_mask)]
    addresses = []
    for name, dtype in _FIELDS:
        a = arrays.get(name)
        if a is None:
            header.append(_ABSENT)
            addresses.append(None)
            continue
        if a.dtype != np.dtype(dtype):
            raise UsageError(f"broadcast_batch: field {name} is {a.dtype}, expected {np.dtype(dtype)}")
        key = (a.__array_interface__["data"][0], a.size, a.dtype.str)
        header.append(-(addresses.index(key) + 2) if key in addresses else a.size)
        addresses.append(key)
    return header, arrays
