// Reading small files named by outside input (configs and their `inherits`, dataset
// metadata, resume states, special-token files, tokenizer models) without blocking on or
// exhausting memory from whatever the name points at.
//
// A FIFO would block open() until a writer appears, and /dev/zero never ends: the file is
// opened non-blocking and must be a regular file of at most `max_bytes`.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

namespace tokenfeed {

inline constexpr std::size_t kMaxSmallFileBytes = std::size_t{16} << 20;  // configs, JSON documents

// Opens `path` read-only without blocking and returns the descriptor (O_CLOEXEC) of a
// regular file. Throws Error(io) naming `what` (e.g. "config file") and the path when it
// cannot be opened or is not a regular file (a FIFO, a device, a directory, a socket).
int open_regular_file(const std::filesystem::path& path, std::string_view what);

// The whole content of the regular file `path`. Throws as open_regular_file, and
// Error(io) when it is larger than `max_bytes` (or grows past it while being read).
std::string read_regular_file(const std::filesystem::path& path, std::string_view what,
                              std::size_t max_bytes = kMaxSmallFileBytes);

// Replaces `path` with `text` so that no reader, and no crash or SIGKILL at any instant,
// ever sees a partial file: the text goes to a temporary file beside it (".NAME.tmp-PID"),
// which is flushed to disk and renamed over `path`. On failure the temporary file is
// removed, `path` is as it was, and Error(io) names `what` and the path.
void write_file_atomically(const std::filesystem::path& path, std::string_view text, std::string_view what);

}  // namespace tokenfeed
