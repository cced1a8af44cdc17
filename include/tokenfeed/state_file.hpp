// A loader's resume state (Loader::save_state) kept in a file, as `tokenfeed dump
// --save-state` keeps it: written so that no reader, and no crash or SIGKILL at any instant,
// ever sees a partial file (a trainer killed while it saves keeps the previous state), and
// read back only from a regular file (never blocking on a FIFO).
//
// Thread-safety: as Loader::save_state and Loader::load_state.
#pragma once

#include <filesystem>

#include "tokenfeed/export.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed {

// Replaces `path` with loader.save_state() and a newline: the text goes to a temporary file
// beside it, flushed to disk and renamed over `path`. Throws Error(io) naming the path; on
// failure `path` is as it was.
TOKENFEED_API void save_state_file(const Loader& loader, const std::filesystem::path& path);

// loader.load_state() of the file's text. Throws Error(io) naming the path when it is not a
// regular file or cannot be read, and as Loader::load_state for its content (the loader is
// then unchanged).
TOKENFEED_API void load_state_file(Loader& loader, const std::filesystem::path& path);

}  // namespace tokenfeed
