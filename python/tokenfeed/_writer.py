"""Writing datasets from Python: ``DatasetWriter`` (one episode-indexed split, all or
nothing) and ``write_dataset_metadata``, both the C++ library's writers."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

from . import _tokenfeed as _core
from ._tokenfeed import SpecialTokenIds, UsageError
from ._values import _Ids, _Mask, _Path, _as_ids, _as_mask


class DatasetWriter:
    """Writes one split of an episode-indexed dataset (``tokens.bin``, ``mask.bin``,
    ``episodes.idx``, in ``shard_00000/``, ...) from token ids made by any tokenizer.

        with tokenfeed.DatasetWriter("out/train", token_dtype="uint16") as w:
            for ids, mask in episodes:
                w.add(ids, mask)
        tokenfeed.write_dataset_metadata("out", token_dtype="uint16", eot_token_id=...)

    Episodes are numbered in the order they are added. A new shard starts when an episode
    would take the current one past ``shard_tokens`` tokens (0: one shard). With
    ``write_mask`` (the default) every episode needs its loss mask, one 0/1 per token.

    All or nothing: the shards go to a hidden temporary directory beside ``split_dir``
    (``.NAME.tmp-*``), which ``finish()`` flushes to disk and renames to ``split_dir``.
    Until then ``split_dir`` is untouched; ``discard()``, a ``with`` block left by an
    exception, or a writer dropped without ``finish()`` removes what was written, so a
    failed run never leaves a split that looks complete.

    ``split_dir`` must not exist or be empty: writing a split over another would keep the
    old shards the new one does not replace, and the loader would read both (``IoError``).
    ``overwrite=True`` replaces it instead, when ``finish()`` succeeds (the old split stays
    as it was until the new one is complete).

    Calls release the GIL and are serialized by a lock, so threads may share a writer (the
    episodes are numbered in the order the calls take it); one writer per split directory.
    """

    def __init__(self, split_dir: _Path, token_dtype: str = "uint32",
                 write_mask: bool = True, shard_tokens: int = 0, overwrite: bool = False) -> None:
        self.split_dir = os.fspath(split_dir)
        self.token_dtype = token_dtype
        self.write_mask = bool(write_mask)
        self._writer = _core._DatasetWriter(self.split_dir, token_dtype, self.write_mask, int(shard_tokens),
                                            bool(overwrite))

    def add(self, tokens: _Ids, mask: Optional[_Mask] = None) -> None:
        """Adds one episode: its token ids and, with ``write_mask``, its 0/1 loss mask."""
        ids = _as_ids(tokens, "DatasetWriter.add tokens")
        m = None if mask is None else _as_mask(mask, "DatasetWriter.add mask")
        self._writer.add(ids, m)

    def add_many(self, tokens: _Ids, lengths: Union[Sequence[int], npt.NDArray[np.integer[Any]]],
                 mask: Optional[_Mask] = None) -> None:
        """Adds ``len(lengths)`` episodes at once: ``tokens`` (and ``mask``) concatenated."""
        ids = _as_ids(tokens, "DatasetWriter.add_many tokens")
        n = np.asarray(lengths)
        if n.size and (n.ndim != 1 or n.dtype.kind not in "iu" or n.min() < 0):
            raise UsageError("DatasetWriter.add_many: lengths must be a 1-D sequence of non-negative integers")
        m = None if mask is None else _as_mask(mask, "DatasetWriter.add_many mask")
        self._writer.add_many(ids, np.ascontiguousarray(n, dtype=np.uint64), m)

    def finish(self) -> Dict[str, int]:
        """Flushes and closes the files and moves the split into ``split_dir``; returns
        episodes, tokens, masked_tokens, shards. Idempotent once it succeeded; if it fails,
        what was written is removed and the writer cannot be used again."""
        return self._writer.finish()

    def discard(self) -> None:
        """Removes everything written so far; ``split_dir`` stays as it was. Does nothing
        after ``finish()``."""
        self._writer.discard()

    @property
    def finished(self) -> bool:
        return self._writer.finished

    def __enter__(self) -> "DatasetWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            self._writer.discard()  # an incomplete split must not look complete
        elif not self._writer.finished:
            self._writer.finish()


def write_dataset_metadata(dataset_dir: _Path, *, token_dtype: str,
                           mask_dtype: Optional[str] = "uint8", eot_token_id: Optional[int] = None,
                           eos_token_id: Optional[int] = None, pad_token_id: Optional[int] = None,
                           vocab_size: Optional[int] = None,
                           special_tokens: Optional[Union[SpecialTokenIds, Mapping[str, int]]] = None,
                           **extra: Any) -> str:
    """Writes ``dataset_dir/dataset_metadata.json`` with the fields the loader reads
    (``token_dtype``, ``mask_dtype``, ``eot_token_id``/``eos_token_id`` - the default pad and
    end-of-text ids -, ``vocab_size``, ``special_tokens`` for turn-aware truncation) plus
    any ``extra`` JSON-serializable fields. The ``content_sha256`` checksums that
    ``DatasetWriter.finish()`` recorded in an existing file are kept (unless ``extra`` gives
    them); the file is written to a temporary name and renamed. The library's one metadata
    writer writes it and first reads it as the loader does: a field the loader would refuse
    (a dtype or id of the wrong kind, ``special_tokens`` without system, user, assistant and
    eot) raises FormatError or ConfigError and writes nothing. Returns the file's path."""
    special: Optional[Dict[str, Any]] = None
    if special_tokens is not None:
        if isinstance(special_tokens, SpecialTokenIds):
            s = special_tokens
            special = {"system": s.system, "user": s.user, "assistant": s.assistant, "eot": s.eot}
            if s.tool is not None:
                special["tool"] = s.tool
        else:
            special = {k: int(v) for k, v in special_tokens.items()}

    def whole(value: Optional[int]) -> Optional[int]:
        return None if value is None else int(value)

    _core._write_dataset_metadata(os.fspath(dataset_dir), token_dtype, mask_dtype, whole(vocab_size),
                                  whole(eot_token_id), whole(eos_token_id), whole(pad_token_id),
                                  None if special is None else json.dumps(special), json.dumps(extra))
    return os.path.join(os.fspath(dataset_dir), "dataset_metadata.json")
