"""tokenfeed: fixed-shape LLM training batches from memory-mapped datasets, prepared ahead
of time on background C++ threads, for Python and PyTorch training loops.

    import tokenfeed

    loader = tokenfeed.Loader("data/sample/sample.xml")      # or a dict of the same keys
    for batch in loader.epoch("train"):                      # one epoch; len() batches
        x = torch.from_dlpack(batch.x)                       # no copy
        ...

- ``Loader(config, **overrides)``: ``config`` is an XML file or a dict of its keys (a relative
  ``dataset_dir`` in a dict resolves against the working directory); keyword arguments
  override single keys. Opening the dataset releases the GIL.
- ``loader.epoch(split)``: the rest of the current epoch, with ``len()``; ``iter(loader)``:
  the train split for ever; ``loader.iter(split, steps=N)``: N batches.
- ``loader.vocab_size``, ``special_token_ids``: what the dataset's metadata says (None where
  it says nothing); ``pad_token_id``, ``eot_token_id`` (the end-of-text id) and ``token_ids``:
  the ids the loader settled, by the loader's own rules.
- ``loader.get_batch(split)`` pops a ready batch, with the GIL released while it waits (in
  50 ms slices: Ctrl-C raises KeyboardInterrupt meanwhile, and consumes nothing). Its
  fields are numpy arrays that view the loader's own buffers (no copy; ``segments`` too, as
  a structured array of PackedSegment records); they stay valid while the batch or any
  array from it is alive, even after the loader is gone, and the buffers go back to the
  pool when the last of them is released. Hold at most ``max_held_batches`` (a config key,
  default ``MAX_HELD_BATCHES`` = 4) batches of a split at once (one more raises
  ``UsageError``).
- ``torch.from_dlpack(batch.x)`` and ``batch.to_torch()`` give tensors over the same memory,
  which keep the batch held as long as they live. Autograd keeps the input tensors of every
  micro-batch until ``backward()``: to accumulate gradients over more than
  ``MAX_HELD_BATCHES`` micro-batches, take copies with ``batch.to_torch(copy=True)``.
- A mixture of datasets: the dict takes ``mixture`` (a list of source dicts: ``name``,
  ``weight``, ``dataset_dir`` and any per-dataset key) and ``stages`` (a list of
  ``{"until_step": N, "weights": {"name": w}}``, the last without ``until_step``);
  ``batch.source_ids`` says each row's source, an index into ``loader.source_names``.
- ``state_dict()`` / ``load_state_dict()``: a plain dict, safe to ``torch.save``.
- ``stats(split)``: the figures of ``tokenfeed bench``, with its names and meanings;
  ``reset_stats()`` after a warm-up, as bench's ``--warmup``.
- Errors: ``tokenfeed.Error`` and its subclasses, which are also ``ValueError`` (config,
  state, usage), ``OSError`` (io, format) or ``RuntimeError`` (pipeline); the chat template
  functions raise ``ConversationError`` (a ``ValueError``) for a conversation they cannot
  serialize.
- RL: ``RLLoader(prompts_config, sample_and_score, group_size=, batch_size=, block_size=)``
  packs scored groups of completions into the same batches, with GRPO advantages as
  ``token_weights`` (see ``tokenfeed.rl``).
- Preparation: ``DatasetWriter`` writes an episode-indexed split from token ids made by any
  tokenizer, all or nothing; the chat-template functions build them from pre-tokenized
  messages; ``prepare(input, output_dir, hf_tokenizer=DIR)`` makes a whole dataset from
  conversations with a model's own Hugging Face tokenizer and chat template (the ``[hf]``
  extra); ``prepare_text(inputs, output_dir, ...)`` makes a pretraining dataset from raw text
  (JSONL, parquet, plain text) with the built-in tokenizers or a Hugging Face one.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from ._tokenfeed import (  # noqa: F401  (re-exports)
    DEFAULT_SYSTEM_TEXT,
    IGNORE_INDEX,
    MAX_HELD_BATCHES,
    Batch,
    BatchIterator,
    ConfigError,
    ConversationError,
    Error,
    FormatError,
    IoError,
    Loader,
    PipelineError,
    SpecialTokenIds,
    StateError,
    Tokenizer,
    UsageError,
    __version__,
    make_tokenizer,
    set_logging,
)
from . import _tokenfeed as _core
from .rl import RLLoader, ScoredGroup
from .text_corpus import prepare_text
from ._inspection import inspect  # noqa: F401  (tokenfeed.inspect)

__all__ = [
    "Batch",
    "BatchIterator",
    "ConfigError",
    "ConversationError",
    "DEFAULT_SYSTEM_TEXT",
    "DatasetWriter",
    "Error",
    "FormatError",
    "IGNORE_INDEX",
    "IoError",
    "Loader",
    "MAX_HELD_BATCHES",
    "PipelineError",
    "RLLoader",
    "ScoredGroup",
    "SpecialTokenIds",
    "StateError",
    "Tokenizer",
    "UsageError",
    "__version__",
    "collate_sft_batch",
    "make_tokenizer",
    "pack_sft_ids_and_mask",
    "plan_sft_window",
    "prepare",
    "prepare_text",
    "serialize_chat",
    "serialize_chat_text",
    "set_logging",
    "sft_loss_mask_for_ids",
    "special_token_ids_from_metadata",
    "to_torch",
    "write_dataset_metadata",
    "read_audit_log",
]

_UINT32_MAX = 2**32 - 1

# The types the functions below take, for type checkers: the package's types are these
# inline annotations and the extension's generated stub, _tokenfeed.pyi.
_Path = Union[str, "os.PathLike[str]"]
_Ids = Union[Sequence[int], npt.NDArray[np.integer[Any]]]
_Mask = Union[Sequence[int], Sequence[bool], npt.NDArray[Any]]


# ---------------------------------------------------------------------------------------
# PyTorch


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
        arrays = batch_or_array.arrays()
        arrays.pop("segments", None)
        names = list(arrays) if fields is None else list(fields)
        out = {}
        for name in names:
            if name == "segments":
                raise UsageError("to_torch: segments is a numpy structured array (row, column, positions, episode), "
                                 "which has no tensor form; use batch.segments['positions'] etc.")
            if name not in arrays:
                raise UsageError(f"to_torch: the batch has no non-empty field '{name}' (it has {sorted(arrays)})")
            out[name] = tensor(arrays[name])
        return out
    return tensor(batch_or_array)


# ---------------------------------------------------------------------------------------
# Token ids and masks from Python values


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


# ---------------------------------------------------------------------------------------
# Writing datasets


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


_AUDIT_PREFIX = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) \| TRAINING \| (\w+) \| ")
_AUDIT_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}


def _parse_audit_line(line: str) -> Optional[Dict[str, str]]:
    m = _AUDIT_PREFIX.match(line)
    if m is None:
        return None
    event = {"time": m.group(1), "level": m.group(2)}
    i, n = m.end(), len(line)
    while True:
        eq = line.find("=", i)
        if eq < 0:
            return None
        key = line[i:eq]
        i = eq + 1
        if i < n and line[i] == '"':
            value, i = [], i + 1
            while True:
                if i >= n:
                    return None
                c = line[i]
                if c == '"':
                    i += 1
                    break
                if c == "\\":
                    if i + 1 >= n:
                        return None
                    e = line[i + 1]
                    if e == "x":
                        try:
                            value.append(chr(int(line[i + 2:i + 4], 16)))
                        except ValueError:
                            return None
                        i += 4
                        continue
                    if e not in _AUDIT_ESCAPES:
                        return None
                    value.append(_AUDIT_ESCAPES[e])
                    i += 2
                    continue
                value.append(c)
                i += 1
            text = "".join(value)
        else:
            end = line.find(" | ", i)
            end = n if end < 0 else end
            text, i = line[i:end], end
        event[key] = text
        if i == n:
            return event
        if not line.startswith(" | ", i):
            return None
        i += 3


def read_audit_log(path: _Path) -> Tuple[List[Dict[str, str]], Optional[str]]:
    """The events of an audit log file, and its torn last line.

    Each complete line (ended by a newline) is one event: a dict of ``time``, ``level``,
    ``action`` and the event's fields, quoted values unescaped. A last line without its
    newline was cut short (the process was killed while writing it): it is returned as the
    second item, never taken for an event; ``None`` when the file ends cleanly. A complete
    line that is not an event raises ``FormatError`` naming the file and line."""
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
        text = f.read()
    lines = text.split("\n")
    torn = lines.pop() or None  # the text after the last newline
    events = []
    for number, line in enumerate(lines, 1):
        event = _parse_audit_line(line)
        if event is None:
            raise FormatError(f"{os.fspath(path)}: line {number} is not an audit event: {line[:120]!r}")
        events.append(event)
    return events, torn


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


def prepare(input: _Path, output_dir: _Path, *,  # noqa: A002
            hf_tokenizer: Optional[_Path] = None, val_split: float = 0.0, seed: int = 0,
            shard_tokens: int = 0, token_dtype: str = "auto", on_error: str = "fail",
            messages_field: str = "messages", workers: int = 0, progress: bool = False,
            chunk_records: int = 256, max_line_bytes: int = 64 << 20) -> Dict[str, Any]:
    """Prepares an SFT dataset (train/, val/, dataset_metadata.json) from a JSONL or parquet
    file of conversations with ``hf_tokenizer``, a local Hugging Face tokenizer directory
    (tokenizer.json, tokenizer_config.json with its chat_template), the assistant-only loss
    mask derived from the template; see ``tokenfeed.hf_prepare`` for the options. Needs
    ``pip install 'tokenfeed[hf]'``; returns the run's summary."""
    if hf_tokenizer is None:
        raise UsageError("tokenfeed.prepare needs hf_tokenizer=DIR (a Hugging Face tokenizer directory); the "
                         "built-in tokenizers are prepared by the `tokenfeed prepare` command")
    from . import hf_prepare
    return hf_prepare.prepare(input, output_dir, hf_tokenizer=hf_tokenizer, val_split=val_split, seed=seed,
                              shard_tokens=shard_tokens, token_dtype=token_dtype, on_error=on_error,
                              messages_field=messages_field, workers=workers, progress=progress,
                              chunk_records=chunk_records, max_line_bytes=max_line_bytes)


# ---------------------------------------------------------------------------------------
# The chat template (token-native; see include/tokenfeed/chat_format.hpp)


def special_token_ids_from_metadata(dataset_dir: _Path) -> SpecialTokenIds:
    """The chat template's ids recorded in ``dataset_dir/dataset_metadata.json``, read as
    the loader reads them."""
    path = os.path.join(os.fspath(dataset_dir), "dataset_metadata.json")
    if not os.path.isfile(path):
        raise IoError(f"cannot read '{path}': no such file")
    special = _core._special_tokens_from_metadata(os.fspath(dataset_dir))
    if special is None:
        raise FormatError(f"'{path}' has no special_tokens with system, user, assistant and eot ids")
    return special


def _messages(messages: Sequence[Any], content_key: str) -> Tuple[List[str], List[Any], List[bool]]:
    """Roles, contents and whether each message is trained (OpenAI's ``"weight"``: 1, the
    default, or 0)."""
    roles, contents, trained = [], [], []
    for i, message in enumerate(messages):
        weight = 1
        if isinstance(message, Mapping):
            if "role" not in message or content_key not in message:
                raise UsageError(f"message {i} needs 'role' and '{content_key}'")
            roles.append(str(message["role"]))
            contents.append(message[content_key])
            weight = message.get("weight", 1)
        else:
            role, content = message
            roles.append(str(role))
            contents.append(content)
        if isinstance(weight, bool) or weight not in (0, 1):
            raise ConversationError(f'message {i + 1} "weight" is {weight!r}, expected 0 or 1')
        trained.append(weight == 1)
    return roles, contents, trained


def serialize_chat(messages: Sequence[Union[Mapping[str, Any], Tuple[str, _Ids]]], special: SpecialTokenIds,
                   default_system_ids: _Ids = (), vocab_size: Optional[int] = None, with_mask: bool = False
                   ) -> Union[npt.NDArray[np.uint32], Tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint8]]]:
    """The template's token ids of a pre-tokenized conversation (uint32), system turn first;
    with ``with_mask``, ``(ids, mask)`` with the loss mask ``tokenfeed prepare`` writes.

    ``messages``: ``{"role": ..., "ids": [...]}`` dicts or ``(role, ids)`` pairs, the ids made
    by any tokenizer; a dict's ``"weight": 0`` keeps that turn out of the mask (OpenAI's
    fine-tuning format). ``default_system_ids`` is the content of the system turn injected
    when the conversation has none. With ``vocab_size``, every content id must be below it.
    Raises ConversationError (a ValueError) naming the problem for an unusable conversation.
    """
    roles, contents, trained = _messages(messages, "ids")
    ids = [_as_ids(c, f"serialize_chat message {i}") for i, c in enumerate(contents)]
    out, mask = _core._serialize_tokenized_chat(roles, ids, trained, special,
                                                _as_ids(default_system_ids, "default_system_ids"), vocab_size)
    return (out, mask) if with_mask else out


def _conversation_json(messages: Sequence[Any]) -> str:
    """``{"messages": [...]}`` as one JSON line, the input of ``tokenfeed prepare``: pairs
    become ``{"role": ..., "content": ...}``; values JSON cannot represent are refused."""
    out = []
    for i, message in enumerate(messages):
        if isinstance(message, Mapping):
            m = dict(message)
        else:
            try:
                role, content = message
            except (TypeError, ValueError):
                raise ConversationError(f"message {i + 1} is {type(message).__name__}, expected a dict with "
                                        "'role' and 'content' or a (role, content) pair") from None
            m = {"role": role, "content": content}
        try:
            out.append(json.dumps(m, ensure_ascii=False, allow_nan=False))
        except (TypeError, ValueError) as e:
            raise ConversationError(f"message {i + 1} holds a value that is not JSON text ({e})") from None
    return '{"messages": [' + ", ".join(out) + "]}"


def serialize_chat_text(messages: Sequence[Union[Mapping[str, Any], Tuple[str, Any]]], tokenizer: Tokenizer,
                        default_system_text: str = DEFAULT_SYSTEM_TEXT, with_mask: bool = False
                        ) -> Union[npt.NDArray[np.uint32], Tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint8]]]:
    """The template's token ids of a text conversation, encoded with a built-in tokenizer
    (``make_tokenizer``); with ``with_mask``, ``(ids, mask)`` with the loss mask
    ``tokenfeed prepare`` writes.

    ``messages``: OpenAI chat messages (``{"role": ..., "content": ...}`` dicts) or
    ``(role, content)`` pairs. They go through the same C++ parser as a line of
    ``tokenfeed prepare``'s input, so both accept and refuse the same conversations: content
    is a string or a list of ``{"type": "text", "text": ...}`` parts (joined); the
    ``developer`` role is the system role; ``"weight": 0`` keeps a turn out of the mask; an
    assistant message's ``tool_calls`` are written after its content, one
    ``{"name": ..., "arguments": {...}}`` per line, and trained on (its content may then be
    ``None``). Any other ``None``, numbers or other part types raise ConversationError (a
    ValueError) naming the message (numbered from 1, as the command's skip details).
    ``default_system_text=""``: no system turn for a conversation without one."""
    if isinstance(messages, (str, bytes)) or isinstance(messages, Mapping):
        raise ConversationError("serialize_chat_text: messages must be a list of messages")
    ids, mask = _core._serialize_json_chat(_conversation_json(messages), tokenizer, default_system_text)
    return (ids, mask) if with_mask else ids


def sft_loss_mask_for_ids(ids: _Ids, special: SpecialTokenIds) -> npt.NDArray[np.uint8]:
    """The assistant-only loss mask (uint8 0/1) of serialized ids: 1 on assistant content and
    the end-of-turn closing an assistant turn, 0 elsewhere (role tokens included)."""
    return _core._sft_loss_mask_for_ids(_as_ids(ids), special)


def plan_sft_window(ids: _Ids, S: int, special: SpecialTokenIds) -> Tuple[int, int, int, int]:
    """Which tokens a row of length S keeps (turn-aware truncation):
    ``ids[head_begin:head_end]`` then ``ids[tail_begin:tail_end]``, as that 4-tuple."""
    return _core._plan_sft_window(_as_ids(ids), int(S), special)


def pack_sft_ids_and_mask(ids: _Ids, mask: _Mask, S: int, special: SpecialTokenIds,
                          pad_id: int) -> Tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint8]]:
    """Truncates (turn-aware) and right-pads one episode to exactly S tokens:
    ``(ids uint32 [S], mask uint8 [S])``, the mask 0 on padding."""
    return _core._pack_sft_ids_and_mask(_as_ids(ids), _as_mask(mask), int(S), special, int(pad_id))


def collate_sft_batch(rows: Sequence[Tuple[_Ids, _Mask]], T: int, ignore_index: int = IGNORE_INDEX
                      ) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """Collates packed rows of T + 1 tokens (``pack_sft_ids_and_mask`` with S = T + 1) into
    ``(x int64 [B, T], y int64 [B, T], loss_mask uint8 [B, T])``: ``x = ids[:-1]``,
    ``y = ids[1:]`` where the mask is 1 and ``ignore_index`` elsewhere."""
    packed = [(_as_ids(i, "collate_sft_batch ids"), _as_mask(m, "collate_sft_batch mask")) for i, m in rows]
    return _core._collate_sft_batch(packed, int(T), int(ignore_index))
