"""PyTorch tensors over a batch's arrays (``tokenfeed.to_torch``)."""
from __future__ import annotations

from typing import Any, Iterable, Optional

import numpy as np

from ._tokenfeed import Batch, UsageError


def to_torch(batch_or_array: Any, fields: Optional[Iterable[str]] = None, copy: bool = False) -> Any:
    """Torch tensors of a batch's arrays: over the same memory (``torch.from_dlpack``, no
    copy), or with ``copy=True`` tensors that own a copy of it.

    Given a Batch: a dict of its non-empty numeric array fields (``fields`` selects some), as
    torch tensors; ``segments``, a numpy structured array, has no tensor form and stays in
    numpy. Given one array (``batch.x``): that tensor.

    Without ``copy``, each tensor keeps the batch's buffers held as the numpy array does, so
    at most ``MAX_HELD_BATCHES`` batches' tensors can be alive at once; the next
    ``get_batch`` raises ``UsageError``. That limit is reached by gradient accumulation:
    autograd keeps every micro-batch's input tensors until ``backward()``. Accumulating over
    more micro-batches than that, take ``copy=True`` tensors (a memcpy of the batch; the batch
    can then be released at once).
    """
    import torch

    def tensor(a: Any) -> Any:
        t = torch.from_dlpack(a)
        return t.clone() if copy else t

    if isinstance(batch_or_array, Batch):
        if fields is None:
            arrays = batch_or_array.arrays()
            arrays.pop("segments", None)
            return {name: tensor(a) for name, a in arrays.items()}
        # Only the fields asked for are read; one the loader's `fields` did not choose raises
        # UsageError naming it.
        out = {}
        for name in fields:
            if name == "segments":
                raise UsageError("to_torch: segments is a numpy structured array (row, column, positions, episode), "
                                 "which has no tensor form; use batch.segments['positions'] etc.")
            a = getattr(batch_or_array, name, None) if isinstance(name, str) else None
            if not isinstance(a, np.ndarray) or a.size == 0:
                have = sorted(n for n in batch_or_array.arrays() if n != "segments")
                raise UsageError(f"to_torch: the batch has no non-empty field '{name}' (it has {have})")
            out[name] = tensor(a)
        return out
    return tensor(batch_or_array)
