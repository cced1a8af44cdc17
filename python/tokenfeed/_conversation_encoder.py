"""One conversation to token ids and loss mask: the record checked, rendered with the chat
template, tokenized, masked, and assigned to train or val by its content; a chunk of records
at a time (``ConversationEncoder.encode_chunk``), in this process or a worker's."""
from __future__ import annotations

import array
import datetime
import hashlib
import json
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._bad_record import BadRecord
from ._chat_template import ChatTemplate
from ._conversation_reader import _LineTooLong
from ._hf_tokenizer import HfTokenizer
from ._loss_mask import token_mask
from ._token_pieces import _UINT32_CODE

_SPLIT_DOMAIN = b"tokenfeed-hf-split-v1\0"


def _check_messages(record: Any, field: str) -> Tuple[List[Dict[str, Any]], Any]:
    if not isinstance(record, dict):
        raise BadRecord("bad_messages", f"expected a JSON object, got {type(record).__name__}")
    messages = record.get(field)
    if messages is None:
        raise BadRecord("bad_messages", f"no '{field}' field (set the messages field with --messages-field)")
    if not isinstance(messages, list) or not messages:
        raise BadRecord("bad_messages", f"'{field}' must be a non-empty list of messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRecord("bad_messages", f"message {i} must be an object with a string 'role'")
        weight = m.get("weight", 1)
        if weight not in (0, 1) or isinstance(weight, bool):
            raise BadRecord("bad_messages", f"message {i}: 'weight' must be 0 or 1, got {weight!r}")
    if not any(m["role"] == "assistant" for m in messages):
        raise BadRecord("no_assistant", "the conversation has no assistant message")
    tools = record.get("tools")
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except ValueError as e:
            raise BadRecord("bad_messages", f"'tools' is a string that is not JSON: {e}") from e
    if tools is not None and not isinstance(tools, list):
        raise BadRecord("bad_messages", "'tools' must be a list")
    return messages, tools


def _drop_nulls(value: Any) -> Any:
    """The value with every null-valued key of its objects removed (recursively)."""
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def _split_point(messages: Any, tools: Any, seed: int) -> float:
    """A number in [0, 1) that depends only on the conversation and the seed."""
    canonical = json.dumps({"messages": messages, "tools": tools}, sort_keys=True, ensure_ascii=False,
                           separators=(",", ":"))
    h = hashlib.sha256(_SPLIT_DOMAIN + struct.pack("<Q", seed & 0xFFFFFFFFFFFFFFFF) + canonical.encode("utf-8"))
    top = int.from_bytes(h.digest()[:8], "big")
    return (top >> 11) * 2.0 ** -53



class ConversationEncoder:
    """Parses, renders, tokenizes and masks conversations. One per process."""

    def __init__(self, hf_dir: str, messages_field: str, seed: int, val_split: float,
                 now: datetime.datetime) -> None:
        self.hf = HfTokenizer(hf_dir)
        self.template = ChatTemplate(self.hf, now)
        self.messages_field = messages_field
        self.seed = seed
        self.val_split = val_split
        self._tiled = self._untiled = 0  # ASCII texts whose tokens' texts made them up, or not

    def _encode(self, texts: List[str]) -> List[Tuple[List[int], Any]]:
        """The ids of each text and what tells where its tokens lie: the tokenizer's Encoding,
        or for an ASCII text a _Tiling made without the tokenizer's offsets (see _TokenPieces),
        the same ids and the same character ranges."""
        tokenizer, pieces = self.hf.tokenizer, self.hf.pieces
        if pieces is None or self._untiled > max(64, self._tiled // 16):  # the check fails too often to pay
            return [(enc.ids, enc) for enc in tokenizer.encode_batch(texts, add_special_tokens=False)]
        fast = [i for i, text in enumerate(texts) if text.isascii()]
        out: List[Any] = [None] * len(texts)
        if len(fast) < len(texts):
            slow = [i for i, text in enumerate(texts) if not text.isascii()]
            for i, enc in zip(slow, tokenizer.encode_batch([texts[i] for i in slow], add_special_tokens=False)):
                out[i] = (enc.ids, enc)
        for i, enc in zip(fast, tokenizer.encode_batch_fast([texts[i] for i in fast], add_special_tokens=False)):
            ids = enc.ids
            tiling = pieces.tiling(texts[i], ids)
            if tiling is None:  # not seen so far; the tokenizer's own offsets then
                self._untiled += 1
                enc = tokenizer.encode(texts[i], add_special_tokens=False)
                out[i] = (enc.ids, enc)
            else:
                self._tiled += 1
                out[i] = (ids, tiling)
        return out

    def encode_chunk(self, records: Sequence[Tuple[str, Any]]) -> "ChunkResult":
        """Encodes (name, raw) records: raw is a JSON line (str) or an already parsed object."""
        rendered: List[Tuple[int, str, List[Tuple[int, int]], bool]] = []
        result = ChunkResult()
        for index, (name, raw) in enumerate(records):
            try:
                if isinstance(raw, _LineTooLong):
                    raise BadRecord("invalid_json", f"the line is {raw.size} bytes, longer than the limit of "
                                    f"{raw.limit} (max_line_bytes)")
                if isinstance(raw, str):
                    has_null = "null" in raw  # else there is no null to drop
                    try:
                        raw = json.loads(raw)
                    except ValueError as e:
                        raise BadRecord("invalid_json", str(e)) from e
                    except RecursionError as e:  # nested deeper than the interpreter's stack
                        raise BadRecord("invalid_json", "nested too deeply to parse") from e
                else:
                    has_null = True
                if has_null and isinstance(raw, dict):
                    raw = _drop_nulls(raw)
                messages, tools = _check_messages(raw, self.messages_field)
                text, spans = self.template.assistant_spans(messages, tools)
                try:  # JSON's \ud800 escapes decode to lone surrogates, which no tokenizer encodes
                    text.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise BadRecord("invalid_json", f"a string holds a lone surrogate (\\u{ord(text[e.start]):04x}), "
                                    "which is not text") from e
                val = self.val_split > 0 and _split_point(messages, tools, self.seed) < self.val_split
                rendered.append((index, text, spans, val))
            except BadRecord as e:
                result.bad.append((index, name, e.reason, e.detail))
            except RecursionError:  # parsed, but too deep for the null dropping or the template
                result.bad.append((index, name, "invalid_json", "nested too deeply to process"))
        encodings = self._encode([r[1] for r in rendered])
        trim = not self.template.uses_generation
        special = self.hf.special_ids
        # Per split: the ids of its episodes, one after the other (a list of ints, turned into
        # an array once: converting each episode's list on its own costs several times more),
        # their masks and their lengths.
        parts: Dict[bool, Tuple[List[int], List[np.ndarray], List[int]]] = {False: ([], [], []), True: ([], [], [])}
        for (index, text, spans, val), (ids, enc) in zip(rendered, encodings):
            mask = token_mask(text, enc, spans, special, trim, self.hf.offsets_tile_text, ids)
            if not mask.any():
                result.bad.append((index, records[index][0], "empty_mask",
                                   "no token is trained (every assistant message has weight 0 or renders empty)"))
                continue
            tokens, masks, lengths = parts[val]
            tokens += ids
            masks.append(mask)
            lengths.append(len(ids))
        result.bad.sort()
        for val, (tokens, masks, lengths) in parts.items():
            if lengths:
                result.splits[val] = (np.frombuffer(array.array(_UINT32_CODE, tokens), dtype=np.uint32),
                                      np.concatenate(masks), np.asarray(lengths, dtype=np.uint64))
        result.records = len(records)
        return result


class ChunkResult:
    """The encoded episodes of a chunk of records, per split, in input order, and its bad
    records as (index in chunk, name, reason, detail)."""

    def __init__(self) -> None:
        self.splits: Dict[bool, Tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self.bad: List[Tuple[int, str, str, str]] = []
        self.records = 0


def end_of_turn_id(encoder: ConversationEncoder) -> Optional[int]:
    """The special token that closes an assistant turn: the last special token the mask trains
    in a probe conversation, if the template renders one."""
    probe = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    for messages in (probe, [{"role": "system", "content": "S"}] + probe):
        try:
            text, spans = encoder.template.assistant_spans(messages)
        except BadRecord:
            continue
        enc = encoder.hf.tokenizer.encode(text, add_special_tokens=False)
        mask = token_mask(text, enc, spans, encoder.hf.special_ids, not encoder.template.uses_generation,
                          encoder.hf.offsets_tile_text)
        trained_special = [i for i, m in zip(enc.ids, mask) if m and i in encoder.hf.special_ids]
        if trained_special:
            return int(trained_special[-1])
    return None
