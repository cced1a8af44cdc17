// JsonJournal: an append-only file of JSON documents, one a line, for a record that grows by
// one entry at a time (prepare-text's finished shards) and must never be rewritten whole:
// appending an entry costs the entry, however many came before it.
//
// A line is complete when its '\n' is in the file. append() writes each line and its '\n'
// to a file opened O_APPEND, so a process killed mid-append leaves at most one torn last
// line: read_json_journal skips it, and a JsonJournal reopened at the bytes it counted cuts
// it off before appending.
//
// Thread-safety: a JsonJournal is used by one thread; read_json_journal has no state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tokenfeed {

class JsonJournal {
 public:
  // Opens `path` for appending, creating it when missing, and cuts it to `keep_bytes` (the
  // complete lines read_json_journal counted; 0 for a new journal). Throws Error(io) naming
  // the path, Error(format) when the file is shorter than keep_bytes.
  JsonJournal(std::filesystem::path path, std::uint64_t keep_bytes);
  ~JsonJournal();
  JsonJournal(const JsonJournal&) = delete;
  JsonJournal& operator=(const JsonJournal&) = delete;

  // Appends `line` and a '\n'. REQUIRES: `line` holds no '\n' (a JSON dump without indent).
  // Throws Error(io) naming the path.
  void append(std::string_view line);
  std::uint64_t bytes() const noexcept { return bytes_; }  // the file's length

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t bytes_ = 0;
};

// Reads the complete lines of the journal at `path` in order, handing each, parsed, to
// `on_line`, and returns the bytes they span: a torn last line (no '\n') is left out. Throws
// Error(io) when the file cannot be read, Error(format) naming the file and line when a
// complete line is not JSON (a journal damaged otherwise than by a kill).
std::uint64_t read_json_journal(const std::filesystem::path& path,
                                const std::function<void(const nlohmann::json&)>& on_line);

}  // namespace tokenfeed
