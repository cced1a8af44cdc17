#include "tokenfeed/audit.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "io/regular_file.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

constexpr std::string_view kSeparator = " | ";

bool is_control(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// YYYY-MM-DDTHH:MM:SS.mmmZ, digit positions and punctuation as AuditLog writes them.
bool is_timestamp(std::string_view t) {
  static constexpr std::string_view kShape = "0000-00-00T00:00:00.000Z";
  if (t.size() != kShape.size()) return false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (kShape[i] == '0' ? !is_digit(t[i]) : t[i] != kShape[i]) return false;
  }
  return true;
}

int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A double-quoted value starting at text[i] == '"': unescaped into `out`, `i` moved past the
// closing quote. False when it is not one AuditLog could have written.
bool read_quoted(std::string_view text, std::size_t& i, std::string& out) {
  for (++i; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      ++i;
      return true;
    }
    if (is_control(c)) return false;  // the writer escapes every control character
    if (c != '\\') {
      out.push_back(c);
      continue;
    }
    if (++i == text.size()) return false;
    switch (text[i]) {
      case '"':
      case '\\':
        out.push_back(text[i]);
        break;
      case 'n':
        out.push_back('\n');
        break;
      case 'r':
        out.push_back('\r');
        break;
      case 't':
        out.push_back('\t');
        break;
      case 'x': {
        if (i + 2 >= text.size()) return false;
        const int high = hex_value(text[i + 1]);
        const int low = hex_value(text[i + 2]);
        if (high < 0 || low < 0) return false;
        out.push_back(static_cast<char>(high * 16 + low));
        i += 2;
        break;
      }
      default:
        return false;
    }
  }
  return false;  // no closing quote
}

// A value the writer leaves unquoted: non-empty, no separator, quote, backslash or control.
bool is_plain_value(std::string_view v) {
  if (v.empty() || v.find_first_of(" ,|\"=\\") != std::string_view::npos) return false;
  for (const char c : v) {
    if (is_control(c)) return false;
  }
  return true;
}

[[noreturn]] void format_error(const std::filesystem::path& path, std::uint64_t line, const std::string& why) {
  throw Error(ErrorKind::format, "audit log '" + path.string() + "': line " + std::to_string(line) + " " + why);
}

// At most this much of a bad line is quoted in an error message.
constexpr std::size_t kQuotedLineBytes = 120;

std::string excerpt(std::string_view line) {
  std::string out;
  for (const char c : line.substr(0, kQuotedLineBytes)) {
    if (is_control(c)) {
      out += '?';
    } else {
      out.push_back(c);
    }
  }
  if (line.size() > kQuotedLineBytes) out += "...";
  return out;
}

}  // namespace

std::optional<std::string_view> AuditEvent::field(std::string_view key) const noexcept {
  for (const auto& [k, v] : fields) {
    if (k == key) return v;
  }
  return std::nullopt;
}

std::optional<AuditEvent> parse_audit_line(std::string_view text, std::uint64_t line) {
  AuditEvent event;
  event.line = line;
  constexpr std::size_t kTimeBytes = 24;
  if (!is_timestamp(text.substr(0, kTimeBytes))) return std::nullopt;
  event.time = std::string(text.substr(0, kTimeBytes));
  std::string_view rest = text.substr(kTimeBytes);
  constexpr std::string_view kCategory = " | TRAINING | ";
  if (!rest.starts_with(kCategory)) return std::nullopt;
  rest.remove_prefix(kCategory.size());
  const std::size_t level_end = rest.find(kSeparator);
  if (level_end == 0 || level_end == std::string_view::npos) return std::nullopt;
  for (const char c : rest.substr(0, level_end)) {
    if (c < 'A' || c > 'Z') return std::nullopt;
  }
  event.level = std::string(rest.substr(0, level_end));
  rest.remove_prefix(level_end + kSeparator.size());

  std::size_t i = 0;
  for (bool first = true;; first = false) {
    const std::size_t eq = rest.find('=', i);
    if (eq == std::string_view::npos || eq == i) return std::nullopt;
    std::string key(rest.substr(i, eq - i));
    for (const char c : key) {
      if (is_control(c)) return std::nullopt;
    }
    if (first != (key == "action")) return std::nullopt;  // action comes first, and once
    i = eq + 1;
    std::string value;
    if (i < rest.size() && rest[i] == '"') {
      if (!read_quoted(rest, i, value)) return std::nullopt;
    } else {
      const std::size_t end = std::min(rest.find(kSeparator, i), rest.size());
      value = std::string(rest.substr(i, end - i));
      if (!is_plain_value(value)) return std::nullopt;
      i = end;
    }
    if (first) {
      event.action = std::move(value);
    } else {
      event.fields.emplace_back(std::move(key), std::move(value));
    }
    if (i == rest.size()) return event;
    if (rest.substr(i, kSeparator.size()) != kSeparator) return std::nullopt;
    i += kSeparator.size();
  }
}

// The file, a buffer of it, and the line being assembled across buffers.
struct AuditLogReader::Impl {
  std::filesystem::path path;
  int fd = -1;
  std::vector<char> buffer = std::vector<char>(std::size_t{1} << 16);
  std::string_view unread;          // what remains of the buffer's last read
  std::string pending;              // the current line so far, at most kMaxAuditLineBytes of it
  std::uint64_t pending_bytes = 0;  // the current line's length so far, beyond what is kept too
  std::uint64_t line = 1;
  bool at_end = false;
  std::optional<AuditTornLine> torn;

  ~Impl() {
    if (fd >= 0) ::close(fd);
  }

  // Refills `unread`; false at the end of the file.
  bool refill() {
    for (;;) {
      const ssize_t got = ::read(fd, buffer.data(), buffer.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0)
        throw Error(ErrorKind::io, "audit log '" + path.string() + "' cannot be read: " + std::strerror(errno));
      unread = std::string_view(buffer.data(), static_cast<std::size_t>(got));
      return got > 0;
    }
  }

  // The next complete line into `pending` (true), or the end of the file (false, `torn` set
  // when text followed the last newline).
  bool next_line() {
    pending.clear();
    pending_bytes = 0;
    for (;;) {
      if (unread.empty() && !refill()) {
        if (pending_bytes > 0) torn = AuditTornLine{line, pending_bytes, std::move(pending)};
        return false;
      }
      const std::size_t newline = unread.find('\n');
      const std::string_view piece = unread.substr(0, newline);
      pending_bytes += piece.size();
      if (pending.size() < kMaxAuditLineBytes) {
        pending.append(piece.substr(0, kMaxAuditLineBytes - pending.size()));
      }
      if (newline == std::string_view::npos) {
        unread = {};
        continue;
      }
      unread.remove_prefix(newline + 1);
      if (pending_bytes > kMaxAuditLineBytes) {
        format_error(path, line,
                     "is " + std::to_string(pending_bytes) + " bytes long, more than an audit event's limit of " +
                         std::to_string(kMaxAuditLineBytes));
      }
      return true;
    }
  }
};

AuditLogReader::AuditLogReader(const std::filesystem::path& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->fd = open_regular_file(path, "audit log");
}

AuditLogReader::~AuditLogReader() = default;

std::optional<AuditEvent> AuditLogReader::next() {
  Impl& r = *impl_;
  if (r.at_end) return std::nullopt;
  if (!r.next_line()) {
    r.at_end = true;
    return std::nullopt;
  }
  std::optional<AuditEvent> event = parse_audit_line(r.pending, r.line);
  if (!event) format_error(r.path, r.line, "is not an audit event: '" + excerpt(r.pending) + "'");
  ++r.line;
  return event;
}

const std::optional<AuditTornLine>& AuditLogReader::torn_line() const noexcept { return impl_->torn; }

AuditLogContents read_audit_log(const std::filesystem::path& path) {
  AuditLogReader reader(path);
  AuditLogContents contents;
  while (std::optional<AuditEvent> event = reader.next()) contents.events.push_back(std::move(*event));
  contents.torn_line = reader.torn_line();
  return contents;
}

}  // namespace tokenfeed
