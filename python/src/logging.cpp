// tokenfeed's log lines (tokenfeed/log.hpp) on Python's stderr: tokenfeed.set_logging.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.hpp"
#include "tokenfeed/log.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace tokenfeed_python {
namespace {

// Python's handler: the lines at `g_log_threshold` and above (set_logging's level).
std::atomic<tokenfeed::LogLevel> g_log_threshold{tokenfeed::LogLevel::info};

void write_log_line_to_stderr(tokenfeed::LogLevel level, std::string_view line) {
  if (level < g_log_threshold.load(std::memory_order_relaxed)) return;
  std::string text(line);
  text.push_back('\n');
  std::fwrite(text.data(), 1, text.size(), stderr);
}

}  // namespace

void bind_logging(nb::module_& m) {
  m.def(
      "set_logging",
      [](bool enabled, const std::string& level) {
        const std::pair<const char*, tokenfeed::LogLevel> levels[] = {{"debug", tokenfeed::LogLevel::debug},
                                                                      {"info", tokenfeed::LogLevel::info},
                                                                      {"warning", tokenfeed::LogLevel::warning},
                                                                      {"error", tokenfeed::LogLevel::error}};
        const auto* found =
            std::find_if(std::begin(levels), std::end(levels), [&](const auto& l) { return level == l.first; });
        if (found == std::end(levels))
          usage_error("set_logging: level must be debug, info, warning or error, not '" + level + "'");
        g_log_threshold.store(found->second, std::memory_order_relaxed);
        tokenfeed::set_log_handler(enabled ? tokenfeed::LogHandler(write_log_line_to_stderr) : tokenfeed::LogHandler());
      },
      "enabled"_a = true, "level"_a = "info",
      "Turns tokenfeed's log lines on stderr on or off. level: the least printed: info (the default: one line "
      "per loader at open, warnings), debug (also each split at open and each epoch boundary), warning, error.");
}

}  // namespace tokenfeed_python
