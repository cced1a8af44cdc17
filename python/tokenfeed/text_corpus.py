"""Pretraining corpora: raw text to a tokenfeed dataset (``tokenfeed prepare-text``).

    import tokenfeed
    tokenfeed.prepare_text(["web/*.jsonl.zst"], "data/web", hf_tokenizer="models/gpt2")

    python -m tokenfeed.text_corpus 'web/*.parquet' --output-dir data/web --hf-tokenizer DIR

Reading, splitting, sharding, staging and resuming are the C++ library's (the same code as
the ``tokenfeed prepare-text`` command, which runs this module for ``--hf-tokenizer`` and
parquet input); this module brings what only Python has:

- ``--hf-tokenizer DIR``: a local Hugging Face ``tokenizer.json`` through the ``tokenizers``
  package, each document encoded as ``Tokenizer.encode(text, add_special_tokens=False).ids``
  (in batches, ``encode_batch``, on ``--workers`` threads); ``tokenizer_config.json``, when
  present, names the end-of-text and BOS tokens (``eos_token``, ``bos_token``).
- parquet input through pyarrow, one row group at a time.
- ``--tokenizer-impl native|auto``: the library's own byte-level BPE (``hf-bpe:``) encodes,
  and the ``tokenizers`` package verifies a sample of the documents (``--verify-sample``);
  the command runs this module for that when the package is importable.

Both are in the ``[hf]`` extra: ``pip install 'tokenfeed[hf]'``.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _tokenfeed as _core
from ._command import clear_progress, run_command
from ._hf_tokenizer import TokenizerDir, require, sha256_file, token_text, tokenizer_files
from ._tokenfeed import ConfigError, FormatError

_Path = Union[str, "os.PathLike[str]"]


class HfTextEncoder:
    """A local Hugging Face tokenizer directory, for plain text: tokenizer.json (required) and
    tokenizer_config.json (optional: eos_token, bos_token), read as ``tokenfeed.prepare``
    reads them (``_hf_tokenizer.TokenizerDir``)."""

    def __init__(self, directory: _Path, eos_token: Optional[str], eos: bool, bos: bool) -> None:
        files = TokenizerDir(directory, config_required=False)
        self.tokenizer, self.tokenizer_json, config = files.tokenizer, files.tokenizer_json, files.config
        # Only the tokens that are written are looked up: --no-eos works with any config.
        self.eos_token = None if not eos else eos_token if eos_token is not None else token_text(config.get("eos_token"))
        self.bos_token = token_text(config.get("bos_token")) if bos else None
        self.eos_id = self._id(self.eos_token, "--eos-token" if eos_token is not None else "eos_token")
        self.bos_id = self._id(self.bos_token, "bos_token")
        vocab = self.tokenizer.get_vocab(with_added_tokens=True)
        self.vocab_size = max(self.tokenizer.get_vocab_size(with_added_tokens=True), max(vocab.values(), default=-1) + 1)
        # encode_batch_fast (tokenizers >= 0.21) skips the offsets, which ids do not need.
        self._encode_batch = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        self.version = files.tokenizers_version

    def _id(self, token: Optional[str], what: str) -> Optional[int]:
        if token is None:
            return None
        token_id = self.tokenizer.token_to_id(token)
        if token_id is None:
            raise ConfigError(f"{what} '{token}' is not a token of '{self.tokenizer_json}'")
        return int(token_id)

    def encode(self, texts: List[str]) -> List[List[int]]:
        """Each text's ids, no special tokens added: Tokenizer.encode(text, add_special_tokens=False).ids."""
        return [e.ids for e in self._encode_batch(texts, add_special_tokens=False)]

    def identity(self) -> Dict[str, Any]:
        return {"kind": "huggingface", "model": os.path.realpath(self.tokenizer_json),
                "sha256": sha256_file(self.tokenizer_json), "version": self.version, "vocab_size": self.vocab_size,
                "eos_token_id": self.eos_id, "bos_token_id": self.bos_id}


class ParquetColumn:
    """One text column of a parquet file, from a row on, a row group at a time."""

    def __init__(self, path: str, column: str, first_row: int) -> None:
        pq = require("pyarrow.parquet", "parquet input")
        pa = require("pyarrow", "parquet input")
        try:
            self.file = pq.ParquetFile(path)
        except Exception as e:
            raise FormatError(f"'{path}' is not a parquet file pyarrow can read: {e}") from e
        schema = self.file.schema_arrow
        if column not in schema.names:
            raise FormatError(f"'{path}' has no column '{column}' (it has {schema.names}); name the text column "
                              "with --text-field")
        kind = schema.field(column).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise FormatError(f"'{path}': column '{column}' holds {kind}, not strings")
        self.path, self.column = path, column
        self.column_index = schema.names.index(column)
        self.group = 0
        self.skip = first_row
        self.bytes_read = 0
        meta = self.file.metadata
        while self.group < meta.num_row_groups and self.skip >= meta.row_group(self.group).num_rows:
            self.skip -= meta.row_group(self.group).num_rows
            self.bytes_read += self._group_bytes(self.group)
            self.group += 1

    def _group_bytes(self, group: int) -> int:
        row_group = self.file.metadata.row_group(group)
        # The column's chunk; a nested schema's leaf index may differ, so fall back to the group.
        try:
            return int(row_group.column(self.column_index).total_compressed_size)
        except Exception:
            return int(row_group.total_byte_size)

    def next_batch(self) -> Optional[List[Any]]:
        if self.group >= self.file.metadata.num_row_groups:
            return None
        try:
            chunks = self.file.read_row_group(self.group, columns=[self.column]).column(0)
        except Exception as e:  # a damaged page, a bad compression stream, a short file
            raise FormatError(f"'{self.path}': row group {self.group} of column '{self.column}' cannot be read "
                              f"({type(e).__name__}: {e})") from e
        try:
            values = chunks.to_pylist()
        except UnicodeDecodeError:
            values = _texts_or_bytes(chunks)
        self.bytes_read += self._group_bytes(self.group)
        self.group += 1
        if self.skip:
            values, self.skip = values[self.skip:], 0
        return values


def _texts_or_bytes(chunks: Any) -> List[Any]:
    """A string column holding a value that is not UTF-8 (which pyarrow does not check when
    it reads, but ``to_pylist`` does): each value as str, or as its bytes when it does not
    decode, which the library reports as ``invalid_utf8`` at its row."""
    pa = require("pyarrow", "parquet input")
    binary = pa.large_binary() if pa.types.is_large_string(chunks.type) else pa.binary()
    out: List[Any] = []
    for raw in chunks.cast(binary).to_pylist():
        if raw is None:
            out.append(None)
            continue
        try:
            out.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            out.append(raw)
    return out


# The defaults of `tokenfeed prepare-text`'s options, the library's (tokenfeed::PrepareTextOptions).
_DEFAULTS = _core._prepare_text_defaults()


def prepare_text(inputs: Union[_Path, Sequence[_Path]], output_dir: _Path, *, format: str = "tokens",  # noqa: A002
                 text_field: str = "text", doc_per: str = "file", tokenizer: str = "bytes",
                 hf_tokenizer: Optional[_Path] = None, eos_token: Optional[str] = None, eos: bool = True,
                 bos: bool = False, val_split: float = _DEFAULTS["val_split"], seed: int = _DEFAULTS["seed"],
                 shard_tokens: int = _DEFAULTS["shard_tokens"], token_dtype: str = "auto", on_error: str = "fail",
                 max_document_bytes: int = _DEFAULTS["max_document_bytes"], workers: int = _DEFAULTS["workers"],
                 resume: bool = False, resume_check: str = _DEFAULTS["resume_check"],
                 progress: Optional[Callable[[str, str, bool], None]] = None,
                 progress_seconds: float = 5.0, tokenizer_impl: str = _DEFAULTS["tokenizer_impl"],
                 verify_sample: float = _DEFAULTS["verify_sample"], task: Union[int, str, None] = None,
                 num_tasks: Optional[int] = None, max_part_bytes: int = 0) -> Dict[str, Any]:
    """Prepares a pretraining dataset from raw text; the options are the command's
    (``tokenfeed prepare-text --help``). ``inputs``: paths or globs. ``format``: "tokens"
    (token-stream shards with document offsets) or "episodes" (one episode per document, for
    sft_packed with truncation=split). ``tokenizer``: "bytes" or "sentencepiece:MODEL", or
    ``hf_tokenizer``: a local Hugging Face tokenizer directory. ``workers``: threads that
    tokenize (0: all cores; with ``hf_tokenizer``, the ``tokenizers`` thread pool, which is
    sized once per process: set it before the first parallel encode). ``progress(bar, line,
    done)`` is called every ``progress_seconds``. Returns the summary as a dict. Ctrl-C stops
    the run and keeps its finished shards for ``resume=True``; ``resume_check="content"``
    also tells the inputs by their bytes' SHA-256 (give it to the first run and its resumes).
    ``tokenizer_impl``: with ``hf_tokenizer``, "auto" (the default, as the command's: native
    when it can), "native" (tokenfeed's byte-level BPE, ``hf-bpe:DIR/tokenizer.json``;
    ConfigError naming the feature it cannot reproduce) or "tokenizers" (the package).
    ``verify_sample``: when the native encoder runs and the ``tokenizers`` package is
    installed, that fraction of the documents (by content hash) is encoded by the package too,
    and the first difference stops the run naming the document's file and line; 0 verifies
    none. ``task``/``num_tasks``/``max_part_bytes``: prepare only task ``task``'s part of the
    inputs into ``output_dir/parts/TASK`` (``task="auto"``: from SLURM_ARRAY_TASK_ID /
    SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX), then ``merge_text_parts(output_dir)``
    once every task has finished (``tokenfeed.ray.prepare_text`` does both on Ray)."""
    task_spec = _task_spec(task, num_tasks, max_part_bytes)
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    paths = [os.fspath(p) for p in inputs]
    if tokenizer_impl not in ("auto", "native", "tokenizers"):
        raise ConfigError(f"tokenizer_impl must be 'auto', 'native' or 'tokenizers', not {tokenizer_impl!r}")
    encoder: Optional[HfTextEncoder] = None
    verifier: Optional[HfTextEncoder] = None
    native = _native_tokenizer(hf_tokenizer, tokenizer_impl)
    if native is not None:
        tokenizer, hf_tokenizer = native, None
        verifier = _verifier(native[len("hf-bpe:"):], verify_sample, workers)
    if hf_tokenizer is not None:
        if workers > 0:
            os.environ["RAYON_RS_NUM_CPUS"] = str(workers)  # the tokenizers thread pool, when it starts
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
        encoder = HfTextEncoder(hf_tokenizer, eos_token, eos, bos)
    summary: Dict[str, Any] = _core._prepare_text(
        paths, os.fspath(output_dir), format, text_field, doc_per, tokenizer,
        encoder.encode if encoder is not None else None, encoder.identity() if encoder is not None else None,
        eos_token if encoder is None else None, eos, bos, float(val_split), int(seed), int(shard_tokens),
        token_dtype, on_error, int(max_document_bytes), int(workers), bool(resume), resume_check, ParquetColumn,
        progress, float(progress_seconds), verifier.encode if verifier is not None else None, float(verify_sample),
        task_spec)
    summary["tokenizer"] = f"huggingface {hf_tokenizer}" if encoder is not None else tokenizer
    return summary


def _task_spec(task: Union[int, str, None], num_tasks: Optional[int],
               max_part_bytes: int) -> Optional[Tuple[int, int, int]]:
    """(index, count, max_part_bytes) for the library, from prepare_text's task options."""
    if task is None:
        if num_tasks is not None or max_part_bytes:
            raise ConfigError("num_tasks and max_part_bytes go with task=I (or task='auto')")
        return None
    if num_tasks is not None and (isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1):
        raise ConfigError(f"num_tasks must be a positive integer, not {num_tasks!r}")
    if isinstance(max_part_bytes, bool) or not isinstance(max_part_bytes, int) or max_part_bytes < 0:
        raise ConfigError(f"max_part_bytes must be a non-negative integer, not {max_part_bytes!r}")
    if task == "auto":
        index, count = _core._text_task_from_environment(num_tasks)
        return index, count, max_part_bytes
    if isinstance(task, bool) or not isinstance(task, int) or task < 0:
        raise ConfigError(f"task must be a task number or 'auto', not {task!r}")
    if num_tasks is None:
        raise ConfigError(f"task={task} needs num_tasks=N")
    if task >= num_tasks:
        raise ConfigError(f"task {task} is not below num_tasks {num_tasks} (tasks are numbered from 0)")
    return task, num_tasks, max_part_bytes


def merge_text_parts(output_dir: _Path) -> Dict[str, Any]:
    """``tokenfeed prepare-text --merge OUT``: once every task of ``output_dir`` has finished
    (``prepare_text(..., task=I, num_tasks=N)``), makes the dataset there from its parts,
    staged and swapped in at once: the documents of a one-process run, in its order, split
    alike. Raises ConfigError naming every task that is missing or unfinished. Returns the
    summary as a dict."""
    return _core._merge_text_parts(os.fspath(output_dir))


def _native_tokenizer(hf_tokenizer: Optional[_Path], impl: str) -> Optional[str]:
    """``hf-bpe:DIR/tokenizer.json`` when ``impl`` allows the native encoder and it supports the
    file; None for the tokenizers package (auto says why on stderr; native raises ConfigError)."""
    if hf_tokenizer is None or impl == "tokenizers":
        return None
    tokenizer_json, _ = tokenizer_files(os.fspath(hf_tokenizer), config_required=False)
    refusal = _core._hf_bpe_unsupported(tokenizer_json)
    if not refusal:
        return f"hf-bpe:{tokenizer_json}"
    if impl == "native":
        raise ConfigError(f"--tokenizer-impl native: {refusal}")
    sys.stderr.write(f"tokenfeed prepare-text: the native encoder is not used ({refusal}); encoding with the "
                     "tokenizers package\n")
    return None


def _verifier(tokenizer_json: str, fraction: float, workers: int) -> Optional[HfTextEncoder]:
    """The tokenizers package's encoder of the native run's tokenizer.json, to verify a sample
    with: None when the fraction is 0, or (said on stderr) when the package is not installed."""
    if fraction == 0:
        return None
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        sys.stderr.write(f"tokenfeed prepare-text: --verify-sample {fraction:g}: the tokenizers package is not "
                         f"installed in {sys.executable}; no document is verified\n")
        return None
    if workers > 0:
        os.environ["RAYON_RS_NUM_CPUS"] = str(workers)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
    # eos and bos are the native run's; the verifier only encodes texts.
    return HfTextEncoder(os.path.dirname(tokenizer_json) or ".", None, False, False)


def _print_summary(s: Dict[str, Any], output_dir: str, fmt: str, tokenizer: str) -> None:
    def plural(n: int, noun: str) -> str:
        return f"{n} {noun}{'' if n == 1 else 's'}"

    lines = [f"tokenfeed prepare-text: wrote {output_dir} ({fmt})",
             f"  input      {plural(s['input_files'], 'file')}, {s['input_bytes'] / 1e6:.1f} MB"]
    for name in ("train", "val"):
        c = s[name]
        lines.append(f"  {name:<5}      {plural(c['documents'], 'document')}, {plural(c['tokens'], 'token')}, "
                     f"{plural(c['shards'], 'shard')}; {c['empty_documents']} empty, {c['skipped_lines']} skipped")
    if s["resumed"]:
        lines.append(f"  resumed    {plural(s['shards_reused'], 'finished shard')} kept from the killed run")
    for d in s["removed_stale_dirs"]:
        lines.append(f"  removed    {d} (left by an earlier run that was killed)")
    for reason, r in s["skipped"].items():
        lines.append(f"  skipped    {reason}: {r['count']} (first: {r['first']})")
    eos, bos = s["eos_token_id"], s["bos_token_id"]
    lines.append(f"  tokenizer  {tokenizer}, vocab {s['vocab_size']}, token dtype {s['token_dtype']}, "
                 f"eos {'none' if eos is None else eos}, bos {'none' if bos is None else bos}")
    tokens = s["train"]["tokens"] + s["val"]["tokens"]
    rate = tokens / s["seconds"] if s["seconds"] > 0 else 0.0
    if s["verified_documents"]:
        lines.append(f"  verified   {plural(s['verified_documents'], 'document')} encoded by the tokenizers package "
                     "too, the same ids")
    lines.append(f"  time       {s['seconds']:.2f} s ({rate / 1e6:.2f} Mtokens/s)")
    print("\n".join(lines), flush=True)


def argument_parser() -> argparse.ArgumentParser:
    """The options ``tokenfeed prepare-text`` hands over, with the library's defaults."""
    p = argparse.ArgumentParser(prog="tokenfeed prepare-text",
                                description="Turn raw text into a pretraining dataset (see tokenfeed prepare-text "
                                            "--help)")
    p.add_argument("inputs", nargs="+", help="input files or globs")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--format", choices=("tokens", "episodes"), default="tokens")
    p.add_argument("--text-field", default="text")
    p.add_argument("--doc-per", choices=("file", "line", "blank-line"), default="file")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--tokenizer", default="bytes")
    group.add_argument("--hf-tokenizer")
    eos = p.add_mutually_exclusive_group()
    eos.add_argument("--eos-token")
    eos.add_argument("--no-eos", action="store_true")
    p.add_argument("--bos", action="store_true")
    p.add_argument("--val-split", type=float, default=_DEFAULTS["val_split"])
    p.add_argument("--seed", type=int, default=_DEFAULTS["seed"])
    p.add_argument("--shard-tokens", type=int, default=_DEFAULTS["shard_tokens"])
    p.add_argument("--token-dtype", choices=("auto", "uint16", "uint32"), default="auto")
    p.add_argument("--on-error", choices=("fail", "skip"), default="fail")
    p.add_argument("--max-document-bytes", type=int, default=_DEFAULTS["max_document_bytes"])
    p.add_argument("--workers", type=int, default=_DEFAULTS["workers"])
    p.add_argument("--resume", action="store_true")
    p.add_argument("--resume-check", choices=("stat", "content"), default=_DEFAULTS["resume_check"])
    p.add_argument("--progress-seconds", type=float, default=5.0)
    p.add_argument("--tokenizer-impl", choices=("auto", "native", "tokenizers"), default=_DEFAULTS["tokenizer_impl"])
    p.add_argument("--verify-sample", type=float, default=_DEFAULTS["verify_sample"])
    p.add_argument("--task", type=int)
    p.add_argument("--num-tasks", type=int)
    p.add_argument("--max-part-bytes", type=int, default=0)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``tokenfeed prepare-text`` for --hf-tokenizer and parquet input: exit status 0, or 2 (a
    bad option or value, a missing package), 3 (a file that cannot be read or written), 4 (a
    bad line under --on-error fail, corrupt input, or no document for train), 6 (anything
    else); ended by the signal that stopped it."""
    args = argument_parser().parse_args(argv)
    tty = sys.stderr.isatty()

    def show(bar: str, line: str, done: bool) -> None:
        if tty:
            sys.stderr.write("\r\033[K" + bar)
        elif not done:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def run() -> Dict[str, Any]:
        return prepare_text(args.inputs, args.output_dir, format=args.format, text_field=args.text_field,
                            doc_per=args.doc_per, tokenizer=args.tokenizer, hf_tokenizer=args.hf_tokenizer,
                            eos_token=args.eos_token, eos=not args.no_eos, bos=args.bos, val_split=args.val_split,
                            seed=args.seed, shard_tokens=args.shard_tokens, token_dtype=args.token_dtype,
                            on_error=args.on_error, max_document_bytes=args.max_document_bytes,
                            workers=args.workers, resume=args.resume, resume_check=args.resume_check,
                            progress=show, progress_seconds=0.5 if tty else args.progress_seconds,
                            tokenizer_impl=args.tokenizer_impl, verify_sample=args.verify_sample,
                            task=args.task, num_tasks=args.num_tasks,
                            max_part_bytes=args.max_part_bytes if args.task is not None else 0)

    status, summary = run_command(run, lambda name: f"prepare-text interrupted by {name}; '{args.output_dir}' was "
                                                    "not written. Its finished shards are kept: run the same command "
                                                    "with --resume to go on")
    if status != 0:
        return status
    clear_progress()
    _print_summary(summary, summary["written"], args.format, summary["tokenizer"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
