// Reading an audit log back (loader/audit_log.hpp writes it): one event per complete line,
//
//   TIME | TRAINING | LEVEL | action=ACTION | key=value | key="quoted \"value\"" | ...
//
// exactly as AuditLog::write forms it: TIME is YYYY-MM-DDTHH:MM:SS.mmmZ, LEVEL is upper-case
// letters, `action` is the first field, and a value is either plain (non-empty, without
// space, ',', '|', '=', '"', '\\' or a control character) or double-quoted with '"' and '\\'
// backslash-escaped and control characters written \n, \r, \t or \xHH.
//
// A process killed while writing an event leaves its last line without the newline: that
// line is returned as torn, never parsed as an event. A complete line that is not an event
// (a forged or damaged one) is an error naming the file and the line number.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokenfeed {

struct AuditEvent {
  std::uint64_t line = 0;  // 1-based line number in the file
  std::string time;        // as written: 2026-01-03T16:44:19.628Z
  std::string level;       // INFO
  std::string action;      // the `action` field
  // Every field after `action`, in order, values unescaped.
  std::vector<std::pair<std::string, std::string>> fields;

  // The value of `key`, or nullopt when the event has no such field.
  std::optional<std::string_view> field(std::string_view key) const noexcept;
};

struct AuditLogContents {
  std::vector<AuditEvent> events;
  // The text after the last newline, when the file does not end with one: an event cut
  // short by a kill. nullopt when the file ends cleanly (or is empty).
  std::optional<std::string> torn_line;
};

// The most a line may hold; a longer one is an error (no writer makes one).
inline constexpr std::size_t kMaxAuditLineBytes = std::size_t{16} << 20;

// One complete line (without its newline) as an event, or nullopt when it is not one.
// `line` is recorded in the event.
std::optional<AuditEvent> parse_audit_line(std::string_view text, std::uint64_t line = 0);

// Every event of the audit log `path`, and its torn last line. Throws Error(io) when the
// file cannot be read (or is not a regular file), Error(format) naming the file and the line
// number for a complete line that is not an event or a line longer than kMaxAuditLineBytes.
AuditLogContents read_audit_log(const std::filesystem::path& path);

}  // namespace tokenfeed
