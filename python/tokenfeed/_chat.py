"""The token-native chat template from Python (see include/tokenfeed/chat_format.hpp):
conversations serialized to ids and loss masks, turn-aware truncation and collation, each
through the C++ library's functions."""
from __future__ import annotations

import json
import os
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import _tokenfeed as _core
from ._tokenfeed import (DEFAULT_SYSTEM_TEXT, IGNORE_INDEX, ConversationError, FormatError, IoError,
                         SpecialTokenIds, Tokenizer, UsageError)
from ._values import _Ids, _Mask, _Path, _as_ids, _as_mask


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
