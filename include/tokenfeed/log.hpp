// The logging hook: every line tokenfeed logs (dataset open, epoch boundaries, warnings)
// goes through one process-wide handler, which by default writes to stderr the lines at
// info level and above: one line per loader at open, warnings and errors. Debug lines (each
// split's details at open, each epoch boundary) are printed with TOKENFEED_LOG_LEVEL=debug
// in the environment (warning or error print less); a handler of one's own gets them all.
//
// Thread-safety: set_log_handler may be called at any time from any thread; the handler
// itself may be called from background threads and must be thread-safe.
#pragma once

#include <functional>
#include <string_view>

#include "tokenfeed/export.hpp"

namespace tokenfeed {

enum class LogLevel { debug, info, warning, error };

using LogHandler = std::function<void(LogLevel level, std::string_view line)>;

// Replaces the handler; an empty handler silences logging. Returns the previous one.
TOKENFEED_API LogHandler set_log_handler(LogHandler handler);

// The least level TOKENFEED_LOG_LEVEL (debug, info, warning or error) asks to print; info
// when it is unset or unknown. The default handler and the `tokenfeed` command use it.
TOKENFEED_API LogLevel log_level_from_environment() noexcept;

// Sends one line (no trailing newline) to the current handler.
TOKENFEED_API void log_line(LogLevel level, std::string_view line);

}  // namespace tokenfeed
