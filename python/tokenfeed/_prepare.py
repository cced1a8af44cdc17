"""``tokenfeed.prepare``: an SFT dataset from conversations with a Hugging Face tokenizer
directory; the work is ``tokenfeed.hf_prepare``'s, imported when called (it needs the
``[hf]`` extra)."""
from __future__ import annotations

from typing import Any, Dict, Optional

from . import _tokenfeed as _core
from ._tokenfeed import UsageError
from ._values import _Path


# The library's defaults (tokenfeed::PrepareOptions), as `tokenfeed prepare` has them.
_DEFAULTS = _core._prepare_defaults()


def prepare(input: _Path, output_dir: _Path, *,  # noqa: A002
            hf_tokenizer: Optional[_Path] = None, val_split: float = _DEFAULTS["val_split"],
            seed: int = _DEFAULTS["seed"], shard_tokens: int = _DEFAULTS["shard_tokens"], token_dtype: str = "auto",
            on_error: str = "fail", messages_field: str = "messages", workers: int = _DEFAULTS["workers"],
            progress: bool = False, chunk_records: int = 256,
            max_line_bytes: int = _DEFAULTS["max_line_bytes"]) -> Dict[str, Any]:
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
