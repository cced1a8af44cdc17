// Reading an audit log back: the loader writes one event per complete line (audit_log_dir,
// docs/sampling-and-resume.md lists the events),
//
//   TIME | TRAINING | LEVEL | action=ACTION | key=value | key="quoted \"value\"" | ...
//
// exactly as the loader forms it: TIME is YYYY-MM-DDTHH:MM:SS.mmmZ, LEVEL is upper-case
// letters, `action` is the first field, and a value is either plain (non-empty, without
// space, ',', '|', '=', '"', '\\' or a control character) or double-quoted with '"' and '\\'
// backslash-escaped and control characters written \n, \r, \t or \xHH.
//
// A process killed while writing an event leaves its last line without the newline: that
// line is returned as torn, never parsed as an event, whatever its length. A complete line
// that is not an event (a forged or damaged one, or one longer than kMaxAuditLineBytes, which
// no writer makes) is an error naming the file and the line number.
//
// AuditLogReader hands the events out one at a time, in memory bounded by the line limit
// whatever the file's size; read_audit_log collects them all. `tokenfeed audit LOG` prints a
// log's summary and its epochs' orders from the reader; Python's read_audit_log and
// iter_audit_log return the same events.
//
// Thread-safety: the free functions share no state; an AuditLogReader is one thread's at a
// time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenfeed/export.hpp"

namespace tokenfeed {

struct TOKENFEED_API AuditEvent {
  std::uint64_t line = 0;  // 1-based line number in the file
  std::string time;        // as written: 2026-01-03T16:44:19.628Z
  std::string level;       // INFO
  std::string action;      // the `action` field
  // Every field after `action`, in order, values unescaped.
  std::vector<std::pair<std::string, std::string>> fields;

  // The value of `key`, or nullopt when the event has no such field.
  std::optional<std::string_view> field(std::string_view key) const noexcept;
};

// The most a complete line may hold; a longer one is an error (no writer makes one). A torn
// last line may be longer: its first kMaxAuditLineBytes are kept.
inline constexpr std::size_t kMaxAuditLineBytes = std::size_t{16} << 20;

// The text after a log's last newline, when the file does not end with one: an event cut
// short by a kill.
struct AuditTornLine {
  std::uint64_t line = 0;   // its 1-based line number
  std::uint64_t bytes = 0;  // its length in the file
  std::string text;         // its first min(bytes, kMaxAuditLineBytes) bytes
};

struct AuditLogContents {
  std::vector<AuditEvent> events;
  std::optional<AuditTornLine> torn_line;  // nullopt when the file ends cleanly (or is empty)
};

// An audit log read one event at a time: memory bounded by kMaxAuditLineBytes whatever the
// file's size.
class TOKENFEED_API AuditLogReader {
 public:
  // Opens `path`. Throws Error(io) when it cannot be read or is not a regular file.
  explicit AuditLogReader(const std::filesystem::path& path);
  ~AuditLogReader();
  AuditLogReader(const AuditLogReader&) = delete;
  AuditLogReader& operator=(const AuditLogReader&) = delete;

  // The next event, or nullopt at the end of the file (and from then on). Throws
  // Error(format) naming the file and the line number for a complete line that is not an
  // event or is longer than kMaxAuditLineBytes, Error(io) when the file cannot be read.
  std::optional<AuditEvent> next();

  // Once next() returned nullopt: the torn last line, or nullopt when the file ended cleanly.
  const std::optional<AuditTornLine>& torn_line() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One complete line (without its newline) as an event, or nullopt when it is not one.
// `line` is recorded in the event.
TOKENFEED_API std::optional<AuditEvent> parse_audit_line(std::string_view text, std::uint64_t line = 0);

// Every event of the audit log `path`, and its torn last line (AuditLogReader's, collected:
// memory grows with the file). Throws as AuditLogReader does.
TOKENFEED_API AuditLogContents read_audit_log(const std::filesystem::path& path);

// A field's value as the loader writes it on a line: as it is when it holds no separator
// (space, ',', '|', '='), quote, backslash or control character, else double-quoted with '"'
// and '\\' backslash-escaped and control characters written \n, \r, \t or \xHH. What
// parse_audit_line unescapes.
TOKENFEED_API std::string audit_value_text(std::string_view value);

// A key or action as the loader writes it on a line: control characters escaped as above, so
// that no field can hold one raw (tokenfeed's own names have none).
TOKENFEED_API std::string audit_name_text(std::string_view name);

}  // namespace tokenfeed
