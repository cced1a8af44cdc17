// LineReader: reads a text file line by line with bounded memory, transparently
// decompressing gzip and zstd input (detected by their magic bytes, so FILE.jsonl.gz,
// FILE.jsonl.zst and FILE.jsonl all work whatever their names), and hashing the file's raw
// bytes as they are read.
//
// Lines end at '\n'; a trailing '\r' is removed, as is a UTF-8 byte order mark at the start of
// the file (read_rest, for a whole file as one text, removes the mark and nothing else). A
// line longer than the limit is skipped without being held in memory.
//
// Thread-safety: not thread-safe; one thread reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

namespace tokenfeed {

class LineReader {
 public:
  // Opens `path`. Throws Error(io) when it cannot be opened.
  LineReader(std::filesystem::path path, std::size_t max_line_bytes);
  // Opens the lines of a plain (uncompressed) file that start in the byte range [begin, end):
  // from the first line start at or after `begin` (0, or just after a '\n' at begin - 1 or
  // later) through the last line that starts before `end`, read whole even when it ends past
  // `end`. Consecutive ranges thus give every line of the file exactly once. Line numbers
  // count from the range's first line; the byte order mark is dropped only at byte 0.
  // Throws Error(io) when it cannot be opened, Error(format) when the file is compressed.
  LineReader(std::filesystem::path path, std::size_t max_line_bytes, std::uint64_t begin, std::uint64_t end);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Reads the next line into `line`. Returns false at the end of the input. When the line is
  // longer than max_line_bytes, `line` is empty and `too_long` true. Throws Error(io) on read
  // errors and Error(format) on corrupt or truncated gzip data, naming the file.
  bool next(std::string& line, bool& too_long);

  // Consumes the empty lines ("\n" or "\r\n") that follow, at most `max_lines`, without
  // reading a line that is not empty, and returns how many: a run of empty lines at the cost
  // of scanning its bytes. Line numbers count them. Throws as next() does.
  std::uint64_t skip_empty_lines(std::uint64_t max_lines);

  std::uint64_t line_number() const noexcept { return line_number_; }  // of the last line read, from 1
  // Bytes of the file consumed by the lines read so far: exact for a plain file; for gzip
  // and zstd, the compressed bytes the decoder took, scaled by the share of what it gave
  // that was read as lines, so that the figure reaches the file's size only with its last
  // line (decoded data waiting in the buffer is not counted as read). Never decreases.
  std::uint64_t raw_bytes_read() const noexcept;
  std::uint64_t file_size() const noexcept;                            // 0 when unknown
  bool is_gzip() const noexcept;
  bool is_zstd() const noexcept;
  // Reads everything left of the (decompressed) input into `text`, at most `max_bytes`: past
  // that `text` is empty and `too_long` true (the rest is still consumed). Returns false when
  // nothing was left. Line numbers do not change. Throws as next() does.
  bool read_rest(std::string& text, std::size_t max_bytes, bool& too_long);
  // Hex SHA-256 of the file's bytes. REQUIRES: next() returned false.
  std::string sha256_hex();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::uint64_t line_number_ = 0;
};

}  // namespace tokenfeed
