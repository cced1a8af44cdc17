"""SFT datasets prepared with a model's own Hugging Face tokenizer and chat template.

    tokenfeed.prepare("chats.jsonl", "data/chat", hf_tokenizer="models/Llama-3-8B-Instruct")
    python -m tokenfeed.hf_prepare --input chats.parquet --output-dir data/chat --hf-tokenizer DIR
    tokenfeed prepare --hf-tokenizer DIR --input chats.jsonl --output-dir data/chat   (runs this module)

``DIR`` is a local tokenizer directory: ``tokenizer.json`` (the fast tokenizer) and
``tokenizer_config.json`` whose ``chat_template`` (or a ``chat_template.jinja`` beside it) is
the model's Jinja template. Nothing is downloaded. Each conversation is rendered with that
template in a Jinja environment like Hugging Face's and tokenized with ``tokenizers`` without
adding special tokens (the template writes them), as ``apply_chat_template`` does.

The assistant-only loss mask comes from the template itself:
- a template with ``{% generation %}...{% endgeneration %}`` blocks: the characters those
  blocks render are trained (what ``return_assistant_tokens_mask`` uses);
- any other template: for each assistant message k, the conversation's first k messages are
  rendered with the generation prompt and its first k + 1 without; the characters between
  the two ends are the assistant's reply and what closes its turn. Both renderings must be
  prefixes of the whole conversation's rendering, else the template is inconsistent and the
  conversation is an error (not a silently wrong mask). Whitespace after the last special
  token of that difference (the newline after ChatML's ``<|im_end|>``) is not trained.
Characters map to tokens through the tokenizer's offsets: a token is trained when its
characters overlap a trained range. (For an ASCII conversation and a byte-level BPE, the
same character ranges are found from the tokens' texts, checked to make up the text, instead
of asking the tokenizer for offsets, a sixth of its time: see _TokenPieces.) An assistant
message with ``"weight": 0`` (OpenAI's format) is not trained.

Inputs: JSONL (one object per line, ``.gz`` accepted) or parquet (``.parquet``), each record
holding a list of messages (``messages``, or ``messages_field``) and optionally ``tools``
(a list, or a JSON string of one). Keys whose value is null are dropped from messages (a
parquet struct column has every key in every row), so JSONL and parquet of the same
conversations give the same dataset, byte for byte.

Needs the ``hf`` extra: ``pip install 'tokenfeed[hf]'`` (tokenizers, jinja2, pyarrow).

This module is the run and the command; the parts are modules by job: ``_hf_tokenizer``
(the tokenizer directory), ``_chat_template`` (the Jinja environment and the assistant
spans), ``_loss_mask``, ``_token_pieces``, ``_conversation_reader`` (JSONL and parquet),
``_conversation_encoder`` (one conversation to ids and mask), ``_encode_pool`` (the worker
processes). The output's staging directory, its checks and the token dtype are the C++
library's, as for ``tokenfeed prepare``.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from typing import Any, Dict, Optional, Sequence, Union

from . import _tokenfeed as _core
from ._bad_record import REASONS, BadRecord
from ._chat_template import MAX_RENDER_SECONDS, MAX_RENDERED_CHARS, MIN_JINJA2, ChatTemplate
from ._command import run_command
from ._conversation_encoder import ChunkResult, ConversationEncoder, end_of_turn_id
from ._conversation_reader import MAX_LINE_BYTES, _Input
from ._encode_pool import encode_all
from ._hf_tokenizer import EXTRA_HINT, HfTokenizer
from ._loss_mask import token_mask
from ._tokenfeed import ConfigError, FormatError, __version__
from ._writer import DatasetWriter, write_dataset_metadata

# What this module offered before it was split by job, importable from it as before.
__all__ = ["BadRecord", "ChatTemplate", "ChunkResult", "ConversationEncoder", "EXTRA_HINT", "HfTokenizer",
           "MAX_LINE_BYTES", "MAX_RENDERED_CHARS", "MAX_RENDER_SECONDS", "MIN_JINJA2", "REASONS", "argument_parser", "main",
           "prepare",
           "remove_stale_staging_dirs", "token_mask"]

_Path = Union[str, "os.PathLike[str]"]


def remove_stale_staging_dirs(output_dir: _Path) -> list:
    """Removes the staging directories of ``output_dir`` left by runs that are gone (killed);
    returns their paths. The library's rule (``src/io/staging_dir.hpp``), as the commands use it."""
    return _core._remove_stale_staging_dirs(output_dir)


class _Episodes:
    """The run's train and val writers in its staging directory, and what it counted: the
    conversations and tokens written, the bad records skipped (or the first one raised)."""

    def __init__(self, staging_dir: str, dtype: str, shard_tokens: int, on_error: str) -> None:
        self.on_error = on_error
        self.skipped = {reason: 0 for reason in REASONS}
        self.first_skipped: Dict[str, str] = {}
        self.tokens = 0
        self.conversations = 0
        self.episodes = {False: 0, True: 0}
        self.writers: Dict[bool, DatasetWriter] = {}
        for val, name in ((False, "train"), (True, "val")):
            self.writers[val] = DatasetWriter(os.path.join(staging_dir, name), dtype, shard_tokens=shard_tokens)

    def consume(self, result: ChunkResult) -> None:
        for _, name, reason, detail in result.bad:
            if self.on_error == "fail":
                raise FormatError(f"{name}: {reason}: {detail}")
            self.skipped[reason] += 1
            self.first_skipped.setdefault(reason, f"{name}: {detail}")
        for val, (ids, mask, lengths) in result.splits.items():
            self.writers[val].add_many(ids, lengths, mask)
            self.tokens += len(ids)
            self.conversations += len(lengths)
            self.episodes[val] += len(lengths)

    def finish(self, input_path: str, records: int, val_split: float) -> Dict[str, Dict[str, int]]:
        """Closes both splits (an empty one is left out: the loader refuses it) and returns
        their figures; raises FormatError when train has no conversation."""
        if self.conversations == 0:
            raise FormatError(f"{input_path}: no conversation to write ({records} records, "
                              f"{sum(self.skipped.values())} skipped); the train split needs at least one")
        splits = {}
        for val, name in ((False, "train"), (True, "val")):
            w = self.writers[val]
            if self.episodes[val] == 0:
                w.discard()
                splits[name] = {"episodes": 0, "tokens": 0, "masked_tokens": 0, "shards": 0}
                continue
            summary = w.finish()
            splits[name] = {k: int(summary[k]) for k in ("episodes", "tokens", "masked_tokens", "shards")}
        if splits["train"]["episodes"] == 0:
            raise FormatError(f"{input_path}: all {self.conversations} conversations landed in val (val split "
                              f"{val_split:g}); the train split needs at least one: lower the val split or add "
                              "conversations")
        return splits

    def discard(self) -> None:
        for w in self.writers.values():
            w.discard()


def _check_arguments(on_error: str, val_split: float, shard_tokens: int, chunk_records: int, workers: int,
                     max_line_bytes: int) -> None:
    if on_error not in ("fail", "skip"):
        raise ConfigError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    if not (0.0 <= val_split < 1.0):
        raise ConfigError(f"val split must be in [0, 1) (train needs conversations), got {val_split}")
    if shard_tokens < 0 or chunk_records < 1 or workers < 0:
        raise ConfigError("shard_tokens and workers must be >= 0 and chunk_records >= 1")
    if max_line_bytes < 1:
        raise ConfigError(f"max_line_bytes must be >= 1, got {max_line_bytes}")


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _draw_progress(read: int, total: int, records: int, tokens: int, seconds: float) -> None:
    fraction = min(1.0, read / total) if total else 0.0
    width = 28
    bar = "#" * int(fraction * width) + "." * (width - int(fraction * width))
    rate = records / seconds if seconds > 0 else 0.0
    sys.stderr.write(f"\r\033[K{fraction * 100:3.0f}% [{bar}] {read / 1e6:.1f} / {total / 1e6:.1f} MB  "
                     f"{records} conversations ({rate:.0f}/s)  {tokens} tokens")
    sys.stderr.flush()


def _progress_reporter(source: _Input, episodes: _Episodes, started: float, shown: bool) -> Any:
    """A function that draws the progress bar at most every 0.2 s (``force``: now), when shown."""
    last_draw = 0.0

    def report(force: bool = False) -> None:
        nonlocal last_draw
        t = time.monotonic()
        if shown and (force or t - last_draw >= 0.2):
            last_draw = t
            _draw_progress(source.done_bytes, source.size, source.records, episodes.tokens, t - started)

    return report


def _metadata(encoder: ConversationEncoder, source: _Input, splits: Dict[str, Any], seed: int, val_split: float,
              on_error: str, skipped: Dict[str, int], now: datetime.datetime) -> Dict[str, Any]:
    """What dataset_metadata.json records of the run, beside the loader's fields."""
    record = encoder.hf.record()
    return {
        "splits": splits,
        "source": {"file": os.path.basename(source.path), "format": source.format, "sha256": source.sha256,
                   "bytes": source.size, "records": source.records, "blank_lines": source.blank},
        "chat_template": {"kind": "huggingface",
                          "sha256": record["chat_template_sha256"],
                          "loss_mask": ("the template's {% generation %} blocks" if encoder.template.uses_generation
                                        else "prefix renderings: assistant reply and its end-of-turn tokens"),
                          "strftime_now": now.isoformat(timespec="seconds")},
        "tokenizer": record,
        "split": {"rule": "tokenfeed-hf-split-v1 (sha256 of seed and the canonical JSON of messages and tools)",
                  "seed": int(seed), "val_split": float(val_split)},
        "on_error": on_error,
        "skipped": skipped,
    }


def _write_metadata(staging_dir: str, hf: HfTokenizer, dtype: str, eot_id: Optional[int],
                    summary: Dict[str, Any]) -> None:
    """dataset_metadata.json and tokenizer_state.json into the staging directory."""
    write_dataset_metadata(staging_dir, token_dtype=dtype, mask_dtype="uint8", eot_token_id=eot_id,
                           eos_token_id=hf.token_id("eos_token"), pad_token_id=hf.token_id("pad_token"),
                           vocab_size=hf.vocab_size, special_token_ids=dict(hf.special_token_ids),
                           bos_token_id=hf.token_id("bos_token"), **summary,
                           created_by="tokenfeed prepare --hf-tokenizer", tokenfeed_version=__version__)
    with open(os.path.join(staging_dir, "tokenizer_state.json"), "w", encoding="utf-8") as f:
        json.dump(summary["tokenizer"], f, indent=2)
        f.write("\n")


# The defaults of `tokenfeed prepare`'s options, the library's (tokenfeed::PrepareOptions): the
# same dataset whichever door the data comes in by.
_DEFAULTS = _core._prepare_defaults()


def prepare(input: _Path, output_dir: _Path, *,  # noqa: A002
            hf_tokenizer: _Path, val_split: float = _DEFAULTS["val_split"], seed: int = _DEFAULTS["seed"],
            shard_tokens: int = _DEFAULTS["shard_tokens"], token_dtype: str = "auto", on_error: str = "fail",
            messages_field: str = "messages", workers: int = _DEFAULTS["workers"], progress: bool = False,
            chunk_records: int = 256, max_line_bytes: int = MAX_LINE_BYTES) -> Dict[str, Any]:
    """Prepares ``output_dir`` (train/, val/, dataset_metadata.json, tokenizer_state.json)
    from ``input`` with the tokenizer directory ``hf_tokenizer`` (see the module's doc).

    ``workers``: processes that render and tokenize (0: one per core; 1: this process only);
    the dataset is the same whatever the number. ``on_error``: ``fail`` stops at the first
    bad conversation, naming it; ``skip`` counts it under its reason (a JSONL line longer
    than ``max_line_bytes``, default 64 MiB, is an invalid_json record). All or nothing: the
    output is written to a hidden directory beside ``output_dir`` and renamed at the end.
    Returns the summary that the metadata records.
    """
    started = time.monotonic()
    input_path, output = os.fspath(input), os.path.abspath(os.fspath(output_dir)).rstrip(os.sep)
    _check_arguments(on_error, val_split, shard_tokens, chunk_records, workers, max_line_bytes)
    now = datetime.datetime.now()
    encoder = ConversationEncoder(os.fspath(hf_tokenizer), messages_field, int(seed), float(val_split), now)
    dtype = _core._choose_token_dtype(token_dtype, encoder.hf.vocab_size)
    source = _Input(input_path, messages_field, chunk_records, max_line_bytes)
    _core._check_output_dir(output)
    removed_stale = _core._remove_stale_staging_dirs(output)
    staging = _core._StagingDir(output)
    try:
        episodes = _Episodes(staging.path, dtype, shard_tokens, on_error)
        report = _progress_reporter(source, episodes, started, progress)
        try:
            encode_all(source.chunks(), encoder, workers or _cores(),
                       lambda result: (episodes.consume(result), report()))
            report(force=True)
            if progress:
                sys.stderr.write("\r\033[K")
            splits = episodes.finish(input_path, source.records, val_split)
        except BaseException:
            episodes.discard()
            raise
        summary = _metadata(encoder, source, splits, seed, val_split, on_error, episodes.skipped, now)
        eot_id = end_of_turn_id(encoder)
        if eot_id is None:
            eot_id = encoder.hf.token_id("eos_token")
        _write_metadata(staging.path, encoder.hf, dtype, eot_id, summary)
        _core._check_output_dir(output)
        staging.commit()
    except BaseException:
        staging.remove()
        raise
    summary.update(first_skipped=episodes.first_skipped, conversations=episodes.conversations,
                   tokens=episodes.tokens, token_dtype=dtype, vocab_size=encoder.hf.vocab_size,
                   eot_token_id=eot_id,
                   seconds=time.monotonic() - started, output_dir=output, removed_stale_dirs=removed_stale)
    return summary


# ---------------------------------------------------------------------------------------
# The command


def _print_summary(s: Dict[str, Any], input_path: str) -> None:
    out = [f"tokenfeed prepare: wrote {s['output_dir']}",
           f"  input      {input_path} ({s['source']['format']}, {s['source']['records']} records, "
           f"sha256 {s['source']['sha256'][:16]}...)"]
    for name in ("train", "val"):
        sp = s["splits"][name]
        label = f"  {name:<5}      "
        if sp["episodes"] == 0:
            out.append(label + "no conversations (not written)")
        else:
            out.append(label + f"{sp['episodes']} conversations, {sp['tokens']} tokens ({sp['masked_tokens']} "
                       f"trained on), {sp['shards']} shards")
    for path in s["removed_stale_dirs"]:
        out.append(f"  removed    {path} (left by an earlier run that was killed)")
    out.append(f"  skipped    {sum(s['skipped'].values())} records")
    for reason, count in s["skipped"].items():
        if count:
            out.append(f"    {reason}: {count} (first: {s['first_skipped'][reason]})")
    t = s["tokenizer"]
    out.append(f"  tokenizer  {t['path']} (vocab {s['vocab_size']}, token dtype {s['token_dtype']}, "
               f"eot id {s['eot_token_id']}); mask from {s['chat_template']['loss_mask']}")
    rate = s["conversations"] / s["seconds"] if s["seconds"] > 0 else 0.0
    out.append(f"  time       {s['seconds']:.2f} s ({rate:.0f} conversations/s)")
    print("\n".join(out), flush=True)



def argument_parser() -> argparse.ArgumentParser:
    """The options ``tokenfeed prepare --hf-tokenizer`` hands over, with the library's defaults."""
    parser = argparse.ArgumentParser(
        prog="tokenfeed prepare --hf-tokenizer",
        description="Prepare an SFT dataset with a Hugging Face tokenizer directory and its chat template.")
    parser.add_argument("--input", required=True, help="JSONL (.gz accepted) or .parquet file of conversations")
    parser.add_argument("--output-dir", required=True, help="dataset directory to create (must not exist, or be empty)")
    parser.add_argument("--hf-tokenizer", required=True,
                        help="local directory with tokenizer.json and tokenizer_config.json (chat_template)")
    parser.add_argument("--messages-field", default="messages", help="the field holding the messages")
    parser.add_argument("--val-split", type=float, default=_DEFAULTS["val_split"],
                        help=f"fraction of conversations in val (default {_DEFAULTS['val_split']})")
    parser.add_argument("--seed", type=int, default=_DEFAULTS["seed"])
    parser.add_argument("--shard-tokens", type=int, default=_DEFAULTS["shard_tokens"],
                        help=f"most tokens per shard (default {_DEFAULTS['shard_tokens']}; 0: one shard per split)")
    parser.add_argument("--token-dtype", choices=("auto", "uint16", "uint32"), default="auto")
    parser.add_argument("--on-error", choices=("fail", "skip"), default="fail")
    parser.add_argument("--workers", type=int, default=_DEFAULTS["workers"], help="processes (0: one per core)")
    parser.add_argument("--max-line-bytes", type=int, default=MAX_LINE_BYTES,
                        help="the longest JSONL line read (default 64 MiB); a longer one is invalid_json")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``tokenfeed prepare --hf-tokenizer``: exit status 0, or 2 (a bad option, value or
    tokenizer directory, a missing package), 3 (a file that cannot be read or written), 4 (a bad
    conversation under --on-error fail, or none for train), 6 (anything else)."""
    args = argument_parser().parse_args(argv)

    def run() -> Dict[str, Any]:
        return prepare(args.input, args.output_dir, hf_tokenizer=args.hf_tokenizer, val_split=args.val_split,
                       seed=args.seed, shard_tokens=args.shard_tokens, token_dtype=args.token_dtype,
                       on_error=args.on_error, messages_field=args.messages_field, workers=args.workers,
                       progress=sys.stderr.isatty(), max_line_bytes=args.max_line_bytes)

    status, summary = run_command(run, lambda name: f"prepare interrupted by {name}; removed its temporary output, "
                                                    f"'{args.output_dir}' was not written")
    if status != 0:
        return status
    _print_summary(summary, args.input)
    return 0


if __name__ == "__main__":
    sys.exit(main())
