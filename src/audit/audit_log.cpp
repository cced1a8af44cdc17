#include "audit/audit_log.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cerrno>
#include <ctime>

#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {
namespace {

// UTC time with milliseconds: 2026-01-03T16:44:19.628Z (or the compact file-name form).
std::string utc_timestamp(bool compact) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[64];
  if (compact) {
    std::strftime(text, sizeof text, "%Y%m%dT%H%M%S", &tm);
    return std::string(text) + "." + std::to_string(1000 + millis).substr(1) + "Z";
  }
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  return std::string(text) + "." + std::to_string(1000 + millis).substr(1) + "Z";
}

bool is_control(char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; }

// A control character as an escape: \n, \r, \t, else \xHH. No raw control character ever
// reaches the file, so a value cannot end a line and start a forged event.
void append_escaped(std::string& out, char c) {
  switch (c) {
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    default:
      break;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  const auto byte = static_cast<unsigned char>(c);
  out += "\\x";
  out.push_back(kHex[byte >> 4]);
  out.push_back(kHex[byte & 0xf]);
}

}  // namespace

std::string audit_value_text(std::string_view value) {
  const bool plain = !value.empty() && value.find_first_of(" ,|\"=\\") == std::string_view::npos &&
                     std::none_of(value.begin(), value.end(), is_control);
  if (plain) return std::string(value);
  std::string quoted = "\"";
  for (const char c : value) {
    if (is_control(c)) {
      append_escaped(quoted, c);
      continue;
    }
    if (c == '"' || c == '\\') quoted.push_back('\\');
    quoted.push_back(c);
  }
  quoted.push_back('"');
  return quoted;
}

std::string audit_name_text(std::string_view name) {
  std::string out;
  for (const char c : name) {
    if (is_control(c)) {
      append_escaped(out, c);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string format_id_list(const std::vector<std::uint64_t>& ids) {
  std::string text = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i != 0) text += ", ";
    text += std::to_string(ids[i]);
  }
  return text + "]";
}

AuditLog::AuditLog(const std::filesystem::path& dir, long rank) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(ErrorKind::io, "cannot create audit_log_dir '" + dir.string() + "': " + ec.message());
  // A new file per loader: created exclusively ("x"), so that two loaders of one process
  // opened within the same millisecond never share one (the second gets a suffix).
  const std::string stem = "audit_" + utc_timestamp(true) + "_rank" + std::to_string(rank) + "_" + std::to_string(::getpid());
  for (int n = 0; file_ == nullptr; ++n) {
    path_ = dir / (stem + (n == 0 ? std::string() : "_" + std::to_string(n)) + ".log");
    file_ = std::fopen(path_.c_str(), "wx");
    if (file_ == nullptr && (errno != EEXIST || n == 999)) {
      throw Error(ErrorKind::io, "cannot create audit log '" + path_.string() + "': " + std::strerror(errno));
    }
  }
}

AuditLog::~AuditLog() {
  if (file_ != nullptr) std::fclose(file_);
}

void AuditLog::write(std::string_view action, const Fields& fields) {
  if (file_ == nullptr) return;
  std::string line = utc_timestamp(false) + " | TRAINING | INFO | action=" + audit_name_text(action);
  for (const auto& [key, value] : fields) line += " | " + audit_name_text(key) + "=" + audit_value_text(value);
  line.push_back('\n');
  MutexLock lock(mutex_);
  const bool ok = std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0;
  if (!ok && !write_failed_) {
    write_failed_ = true;
    log_line(LogLevel::error, "[tokenfeed] cannot write audit log '" + path_.string() + "': " + std::strerror(errno));
  }
}

}  // namespace tokenfeed
