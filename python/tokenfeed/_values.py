"""Python values taken by the package's functions: the types they are annotated with, and
token ids and loss masks made into the contiguous numpy arrays the bindings take, bad values
refused with UsageError."""
from __future__ import annotations

import os
from typing import Any, Sequence, Union

import numpy as np
import numpy.typing as npt

from ._tokenfeed import UsageError

_UINT32_MAX = 2**32 - 1

# The types the functions below take, for type checkers: the package's types are these
# inline annotations and the extension's generated stub, _tokenfeed.pyi.
_Path = Union[str, "os.PathLike[str]"]
_Ids = Union[Sequence[int], npt.NDArray[np.integer[Any]]]
_Mask = Union[Sequence[int], Sequence[bool], npt.NDArray[Any]]


def _as_ids(values: Any, what: str = "ids") -> np.ndarray:
    """A contiguous 1-D uint32 array of token ids, refusing negative or too large values."""
    a = np.asarray(values)
    if a.dtype == np.uint32 and a.ndim == 1:
        return np.ascontiguousarray(a)
    if a.size == 0:
        return np.zeros(0, dtype=np.uint32)
    if a.ndim != 1:
        raise UsageError(f"{what}: expected a 1-D sequence of token ids, got shape {a.shape}")
    if a.dtype.kind not in "iu":
        raise UsageError(f"{what}: expected integer token ids, got dtype {a.dtype}")
    if a.min() < 0 or a.max() > _UINT32_MAX:
        raise UsageError(f"{what}: token ids must be in [0, 2**32), got values from {a.min()} to {a.max()}")
    return a.astype(np.uint32)


def _as_mask(values: Any, what: str = "mask") -> np.ndarray:
    """A contiguous 1-D uint8 array of 0/1 values (bools or 0/1 integers)."""
    a = np.asarray(values)
    if a.size == 0:
        return np.zeros(0, dtype=np.uint8)
    if a.ndim != 1:
        raise UsageError(f"{what}: expected a 1-D mask, got shape {a.shape}")
    if a.dtype == np.bool_:
        return a.astype(np.uint8)
    if a.dtype.kind not in "iuf" or not np.isin(a, (0, 1)).all():
        raise UsageError(f"{what}: mask values must be 0/1 or bool")
    return np.ascontiguousarray(a.astype(np.uint8))
