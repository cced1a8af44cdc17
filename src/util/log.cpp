#include "tokenfeed/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "util/thread_annotations.hpp"

namespace tokenfeed {
namespace {

void write_to_stderr(LogLevel level, std::string_view line) {
  static const LogLevel threshold = log_level_from_environment();
  if (level < threshold) return;
  std::string text(line);
  text.push_back('\n');
  std::fwrite(text.data(), 1, text.size(), stderr);
}

Mutex& handler_mutex() {
  static Mutex m;
  return m;
}

// Held by shared_ptr so a handler being replaced can finish a call already under way.
std::shared_ptr<const LogHandler>& current_handler() TF_REQUIRES(handler_mutex()) {
  static std::shared_ptr<const LogHandler> h = std::make_shared<const LogHandler>(write_to_stderr);
  return h;
}

}  // namespace

LogLevel log_level_from_environment() noexcept {
  const char* env = std::getenv("TOKENFEED_LOG_LEVEL");
  const std::string_view v = env != nullptr ? env : "";
  if (v == "debug") return LogLevel::debug;
  if (v == "warning") return LogLevel::warning;
  if (v == "error") return LogLevel::error;
  return LogLevel::info;
}

LogHandler set_log_handler(LogHandler handler) {
  auto next = std::make_shared<const LogHandler>(std::move(handler));
  MutexLock lock(handler_mutex());
  LogHandler previous = *current_handler();
  current_handler() = std::move(next);
  return previous;
}

void log_line(LogLevel level, std::string_view line) {
  std::shared_ptr<const LogHandler> h;
  {
    MutexLock lock(handler_mutex());
    h = current_handler();
  }
  if (h && *h) (*h)(level, line);
}

}  // namespace tokenfeed
