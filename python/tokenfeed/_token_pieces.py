"""Where the tokens of an ASCII text lie, from the texts of a byte-level BPE's tokens instead
of the tokenizer's offsets (a sixth of its time): ``_TokenPieces`` and the ``_Tiling`` it
makes, which answers what ``token_mask`` asks of an Encoding."""
from __future__ import annotations

import array
import json
import operator
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

if TYPE_CHECKING:
    from ._hf_tokenizer import HfTokenizer

# The array module's code for a 32-bit unsigned integer ('I' on every platform Python runs on today).
_UINT32_CODE = next(code for code in "IL" if array.array(code).itemsize == 4)


def _byte_level_chars() -> Dict[int, int]:
    """The ByteLevel pre-tokenizer's alphabet (GPT-2's bytes_to_unicode), inverted: for each
    character it writes, the byte it stands for, as a str.translate table."""
    printable = ([*range(ord("!"), ord("~") + 1)] + [*range(ord("\u00a1"), ord("\u00ac") + 1)] +
                 [*range(ord("\u00ae"), ord("\u00ff") + 1)])
    table = {b: b for b in printable}
    others = [b for b in range(256) if b not in table]
    table.update({256 + i: b for i, b in enumerate(others)})
    return table


class _TokenPieces:
    """The text of every token of a byte-level BPE tokenizer, to find the characters of each
    token of an ASCII text without asking the tokenizer for offsets.

    Offsets are a sixth of the tokenizer's time (encode_batch maps every byte of the text to
    its character in a hash map; encode_batch_fast gives the same ids without them). For a
    byte-level BPE whose normalizer, if any, is a Unicode normal form (each leaves ASCII as
    it is) and whose offsets are not trimmed, the tokens of a text are consecutive runs of its
    bytes, and an ASCII text's bytes are its characters: token i covers the characters from
    the end of token i - 1 over the length of its text. That is used only where it is checked:
    the tokens' texts, one after the other, must be the text itself (see ``tiling``)."""

    NORMAL_FORMS = frozenset(("NFC", "NFD", "NFKC", "NFKD"))

    def __init__(self, pieces: List[str]) -> None:
        self.pieces = pieces
        self.lengths = np.array([len(p) for p in pieces], dtype=np.int64)

    @classmethod
    def of(cls, hf: "HfTokenizer") -> Optional["_TokenPieces"]:
        """The pieces of ``hf``'s tokenizer, or None where the tokenizer is not of that kind."""
        tok = hf.tokenizer
        if not hf.offsets_tile_text or not hasattr(tok, "encode_batch_fast"):
            return None
        model = tok.model
        if type(model).__name__ != "BPE" or model.dropout or model.continuing_subword_prefix or \
                model.end_of_word_suffix:
            return None

        def parts(component: Any) -> List[Dict[str, Any]]:
            if component is None:
                return []
            config = json.loads(component.__getstate__())
            return config.get("normalizers") or config.get("pretokenizers") or [config]

        if not {part.get("type") for part in parts(tok.normalizer)} <= cls.NORMAL_FORMS:
            return None
        byte_level = [part for part in parts(tok.pre_tokenizer) if part.get("type") == "ByteLevel"]
        # A prefix space, or an added token that takes the whitespace beside it (lstrip,
        # rstrip), makes tokens that do not tile the text: every text would fail the check.
        if not byte_level or any(part.get("add_prefix_space") for part in byte_level) or \
                any(t.lstrip or t.rstrip for t in tok.get_added_tokens_decoder().values()):
            return None
        byte_of = _byte_level_chars()
        alphabet = frozenset(map(chr, byte_of))
        # A token with a character outside that alphabet (which the pre-tokenizer never
        # writes) is U+FFFD, and a byte above 127 a character above 127: a text with such a
        # token is not ASCII, so it fails the check.
        pieces = ["\ufffd"] * hf.vocab_size
        for text, token_id in tok.get_vocab(with_added_tokens=False).items():
            if 0 <= token_id < len(pieces):
                pieces[token_id] = text.translate(byte_of) if alphabet.issuperset(text) else "\ufffd"
        for token_id, added in tok.get_added_tokens_decoder().items():
            if 0 <= token_id < len(pieces):
                pieces[token_id] = added.content
        return cls(pieces)

    def tiling(self, text: str, ids: Sequence[int]) -> Optional["_Tiling"]:
        """Where the tokens ``ids`` of the ASCII ``text`` lie in it, or None when their texts
        do not make up the text exactly (then ask the tokenizer)."""
        if not ids:
            return None
        parts = operator.itemgetter(*ids)(self.pieces)
        if (parts if len(ids) == 1 else "".join(parts)) != text:
            return None
        return _Tiling(np.cumsum(self.lengths[np.frombuffer(array.array(_UINT32_CODE, ids), dtype=np.uint32)]))


class _Tiling:
    """What token_mask asks of a tokenizers Encoding, for tokens that tile a text: token i
    covers the characters [ends[i - 1], ends[i])."""

    __slots__ = ("ends",)

    def __init__(self, ends: np.ndarray) -> None:
        self.ends = ends

    def __len__(self) -> int:
        return len(self.ends)

    def char_to_token(self, position: int) -> Optional[int]:
        i = int(np.searchsorted(self.ends, position, side="right"))
        return i if 0 <= position and i < len(self.ends) else None

    def token_to_chars(self, i: int) -> Tuple[int, int]:
        return (int(self.ends[i - 1]) if i else 0, int(self.ends[i]))

    @property
    def offsets(self) -> List[Tuple[int, int]]:
        return [self.token_to_chars(i) for i in range(len(self.ends))]

