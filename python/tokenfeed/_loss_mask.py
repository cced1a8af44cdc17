"""The assistant-only loss mask of a tokenized rendering: the tokens whose characters overlap
the trained character ranges, as transformers' ``return_assistant_tokens_mask`` finds them."""
from __future__ import annotations

from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np


def token_mask(text: str, encoding: Any, spans: Sequence[Tuple[int, int]], special_ids: frozenset,
               trim_after_special: bool, every_char_in_a_token: bool = False,
               ids: Optional[Sequence[int]] = None) -> np.ndarray:
    """The 0/1 mask of the tokens of ``encoding`` (a tokenizers Encoding of ``text``) whose
    characters (offsets) overlap a span, as transformers' ``return_assistant_tokens_mask``
    does. With ``trim_after_special``, a span's trailing whitespace tokens that follow a
    special token of the span are left out (the newline after an end-of-turn token).

    ``every_char_in_a_token``: the offsets tile the text (no post-processor trims them), so a
    span's tokens are those from the one holding its first character to the one holding its
    last, found without converting every offset. ``ids``: ``encoding.ids`` when the caller
    has them already (a conversion that costs as much as the rest of this function)."""
    n = len(encoding)
    if trim_after_special and ids is None:
        ids = encoding.ids
    mask = np.zeros(n, dtype=np.uint8)
    offsets = None
    for a, b in spans:
        if b <= a:
            continue
        first = last = None
        if every_char_in_a_token:
            first, last = encoding.char_to_token(a), encoding.char_to_token(b - 1)
        selected: Union[range, np.ndarray]
        if first is not None and last is not None:
            selected = range(first, last + 1)
        else:
            if offsets is None:
                offsets = np.asarray(encoding.offsets, dtype=np.int64).reshape(n, 2)
            selected = np.flatnonzero((offsets[:, 0] < b) & (offsets[:, 1] > a))
        if len(selected) == 0:
            continue
        if trim_after_special:
            assert ids is not None
            keep = len(selected)
            while keep > 0 and ids[selected[keep - 1]] not in special_ids:
                chars = encoding.token_to_chars(int(selected[keep - 1]))
                if chars is None or text[chars[0]:chars[1]].strip():
                    break
                keep -= 1
            if 0 < keep < len(selected) and ids[selected[keep - 1]] in special_ids:
                selected = selected[:keep]
        if isinstance(selected, range):
            mask[selected.start:selected.stop] = 1
        else:
            mask[selected] = 1
    return mask

