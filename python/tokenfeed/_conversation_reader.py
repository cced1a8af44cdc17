"""The conversations of ``tokenfeed.prepare``'s input, in chunks of (name, raw record): JSONL
(``.gz`` accepted; a line past ``max_line_bytes`` read in bounded pieces and handed on as a
``_LineTooLong``) or parquet, with progress and the file's SHA-256."""
from __future__ import annotations

import gzip
import hashlib
import os
from typing import Any, Iterator, List, Tuple

from . import _tokenfeed as _core
from ._hf_tokenizer import require, sha256_file
from ._tokenfeed import FormatError, IoError

# The longest JSONL line read, in bytes (prepare's max_line_bytes, --max-line-bytes): a
# longer one is read in bounded pieces and is an invalid_json record (skipped and counted
# under --on-error skip), so that one huge line cannot take the memory of the run.
MAX_LINE_BYTES = _core._prepare_defaults()["max_line_bytes"]  # tokenfeed::PrepareOptions' default


class _LineTooLong:
    """A JSONL line past the limit, in place of its text: ``size`` bytes, ``limit``."""

    def __init__(self, size: int, limit: int) -> None:
        self.size, self.limit = size, limit


class _Input:
    """Streams (name, raw record) chunks from a JSONL (optionally gzip) or parquet file, and
    tracks progress and the file's SHA-256."""

    def __init__(self, path: str, messages_field: str, chunk_records: int,
                 max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.messages_field = messages_field
        self.chunk_records = chunk_records
        if not os.path.exists(path) or os.path.isdir(path):
            raise IoError(f"input '{path}' does not exist or is a directory")
        self.size = os.path.getsize(path)  # 0 for a pipe: no progress fraction
        self.is_parquet = path.endswith(".parquet")
        self.is_gzip = path.endswith(".gz")
        self.format = "parquet" if self.is_parquet else "jsonl.gz" if self.is_gzip else "jsonl"
        self.sha256 = ""
        self.done_bytes = 0
        self.records = 0
        self.blank = 0

    def chunks(self) -> Iterator[List[Tuple[str, Any]]]:
        if self.is_parquet:
            yield from self._parquet_chunks()
        else:
            yield from self._jsonl_chunks()

    def _jsonl_chunks(self) -> Iterator[List[Tuple[str, Any]]]:
        sha = hashlib.sha256()
        try:
            raw = open(self.path, "rb")
        except OSError as e:
            raise IoError(f"cannot read '{self.path}': {e.strerror}") from e
        with raw:
            stream: Any = gzip.GzipFile(fileobj=raw) if self.is_gzip else raw
            chunk: List[Tuple[str, Any]] = []
            line_no = 0
            read = 0
            limit = self.max_line_bytes
            try:
                while True:
                    line = stream.readline(limit + 1)
                    if not line:
                        break
                    line_no += 1
                    read += len(line)
                    if not self.is_gzip:
                        sha.update(line)  # the gzip file's own bytes are hashed at the end
                    record: Any
                    if len(line) > limit and not line.endswith(b"\n"):
                        size = len(line)
                        while not line.endswith(b"\n"):  # the rest of the line, in bounded pieces
                            line = stream.readline(limit)
                            if not line:
                                break
                            size += len(line)
                            read += len(line)
                            if not self.is_gzip:
                                sha.update(line)
                        record = _LineTooLong(size - (1 if line.endswith(b"\n") else 0), limit)
                    else:
                        record = line.decode("utf-8", errors="replace").strip()
                        if not record:
                            self.blank += 1
                            continue
                    self.records += 1
                    chunk.append((f"{self.path}:{line_no}", record))
                    if len(chunk) >= self.chunk_records:
                        self.done_bytes = raw.tell() if self.is_gzip else read  # compressed bytes for gzip
                        yield chunk
                        chunk = []
            except (OSError, EOFError, gzip.BadGzipFile) as e:
                raise FormatError(f"'{self.path}': cannot read past line {line_no}: {e}") from e
            self.done_bytes = self.size if self.is_gzip else read
            if chunk:
                yield chunk
        self.sha256 = sha256_file(self.path) if self.is_gzip else sha.hexdigest()
        self.size = max(self.size, self.done_bytes)  # a pipe's size is what was read

    def _parquet_chunks(self) -> Iterator[List[Tuple[str, Any]]]:
        pq = require("pyarrow.parquet", "parquet input")
        try:
            f = pq.ParquetFile(self.path)
        except Exception as e:  # pyarrow raises ArrowInvalid / OSError for a file it cannot read
            raise FormatError(f"'{self.path}' is not a parquet file pyarrow can read: {e}") from e
        names = f.schema_arrow.names
        if self.messages_field not in names:
            raise FormatError(f"'{self.path}' has no column '{self.messages_field}' (its columns: {names}); "
                              "name the messages column with --messages-field")
        columns = [self.messages_field] + (["tools"] if "tools" in names and self.messages_field != "tools" else [])
        total = max(1, f.metadata.num_rows)
        row = 0
        for batch in f.iter_batches(batch_size=self.chunk_records, columns=columns):
            chunk = []
            for record in batch.to_pylist():
                chunk.append((f"{self.path}: row {row}", record))
                row += 1
            self.records += len(chunk)
            self.done_bytes = self.size * row // total
            yield chunk
        self.done_bytes = self.size
        self.sha256 = sha256_file(self.path)

