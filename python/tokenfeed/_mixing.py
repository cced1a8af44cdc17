"""Per-source figures of a mixture's batch (``tokenfeed.per_source_mean``): what online data
mixing methods read each step to set the weights (``Loader.set_mixture_weights``)."""
from __future__ import annotations

from typing import Any, Optional

import numpy as np


def per_source_mean(values: Any, source_ids: Any, num_sources: int, weights: Optional[Any] = None) -> Any:
    """Each source's mean of ``values`` over the rows of a mixture's batch.

    ``values``: per-row values, shape ``[B]`` (a loss per row), or per-token values, shape
    ``[B, T]`` (a loss per token); ``source_ids``: each row's source, shape ``[B]``
    (``batch.source_ids``, indices into ``loader.source_names``); ``weights``: optional, the
    shape of ``values`` (per token: ``batch.token_weights``, so that padding and unweighted
    positions count for nothing). A source's mean is ``sum(weights * values) /
    sum(weights)`` over its rows' entries (every token of the source's rows together, not a
    mean of row means); without weights every entry weighs 1. A source with no rows in the
    batch, or with a total weight of 0, has mean NaN. Entries of weight 0 are left out even
    when their value is NaN or infinite.

    numpy arrays (or lists) give a float64 numpy array of ``num_sources`` means. A torch
    tensor ``values`` gives a tensor on its device, in its floating dtype (float32 for an
    integer tensor); ``source_ids`` and ``weights`` may then be numpy arrays or tensors.
    torch is imported only for a tensor. Raises ValueError for shapes that do not match, or
    a source id outside ``[0, num_sources)``.
    """
    if type(values).__module__.split(".")[0] == "torch":
        return _torch_mean(values, source_ids, num_sources, weights)
    v = np.asarray(values, dtype=np.float64)
    ids = np.asarray(source_ids)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)
    _check(v.shape, ids, num_sources, None if w is None else w.shape)
    if w is None:
        w = np.ones_like(v)
    with np.errstate(invalid="ignore", over="ignore"):
        weighted = np.where(w != 0, v * w, 0.0)
    if v.ndim == 2:
        weighted, w = weighted.sum(axis=1), w.sum(axis=1)
    ids = ids.astype(np.int64)
    sums = np.bincount(ids, weights=weighted, minlength=num_sources)
    totals = np.bincount(ids, weights=w, minlength=num_sources)
    return np.where(totals != 0, sums / np.where(totals != 0, totals, 1), np.nan)


def _check(shape: tuple, ids: Any, num_sources: int, weights_shape: Optional[tuple]) -> None:
    if num_sources < 1:
        raise ValueError(f"per_source_mean: num_sources must be at least 1, got {num_sources}")
    if len(shape) not in (1, 2):
        raise ValueError(f"per_source_mean: values must be per row [B] or per token [B, T], got shape {tuple(shape)}")
    if tuple(ids.shape) != (shape[0],):
        raise ValueError(f"per_source_mean: source_ids must have shape [B] = ({shape[0]},) like the values' rows, "
                         f"got {tuple(ids.shape)}")
    if weights_shape is not None and tuple(weights_shape) != tuple(shape):
        raise ValueError(f"per_source_mean: weights must have the values' shape {tuple(shape)}, "
                         f"got {tuple(weights_shape)}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_sources):
        raise ValueError(f"per_source_mean: source ids must be in [0, {num_sources}), got ids from "
                         f"{int(ids.min())} to {int(ids.max())}")


def _torch_mean(values: Any, source_ids: Any, num_sources: int, weights: Optional[Any]) -> Any:
    import torch

    v = values if values.is_floating_point() else values.float()
    ids = torch.as_tensor(np.asarray(source_ids) if not isinstance(source_ids, torch.Tensor) else source_ids)
    w = None
    if weights is not None:
        w = weights if isinstance(weights, torch.Tensor) else torch.as_tensor(np.asarray(weights))
    _check(tuple(v.shape), ids.cpu(), num_sources, None if w is None else tuple(w.shape))
    ids = ids.to(device=v.device, dtype=torch.int64)
    w = torch.ones_like(v) if w is None else w.to(device=v.device, dtype=v.dtype)
    nonzero = w != 0
    weighted = torch.where(nonzero, v * w, torch.zeros_like(v))
    if v.dim() == 2:
        weighted, w = weighted.sum(dim=1), w.sum(dim=1)
    sums = torch.zeros(num_sources, dtype=v.dtype, device=v.device).index_add_(0, ids, weighted)
    totals = torch.zeros(num_sources, dtype=v.dtype, device=v.device).index_add_(0, ids, w)
    nan = torch.full_like(sums, float("nan"))
    return torch.where(totals != 0, sums / torch.where(totals != 0, totals, torch.ones_like(totals)), nan)
