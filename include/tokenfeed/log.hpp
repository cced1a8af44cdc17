// The logging hook: every line tokenfeed logs (dataset open, epoch boundaries, warnings)
// goes through one process-wide handler, which by default writes to stderr.
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

// Sends one line (no trailing newline) to the current handler.
TOKENFEED_API void log_line(LogLevel level, std::string_view line);

}  // namespace tokenfeed
