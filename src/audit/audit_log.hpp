// AuditLog: an append-only record of what the trainer consumed, one line per event:
//
//   2026-01-03T16:44:19.628Z | TRAINING | INFO | action=epoch_start | split=train | epoch=0 | ...
//
// Events are written when the trainer consumes a batch, never when it is prefetched.
// Each line is flushed, so a crash loses nothing already reported.
// Thread-safety: write() is thread-safe.
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenfeed/audit.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed {

class AuditLog {
 public:
  using Fields = std::vector<std::pair<std::string, std::string>>;

  // A disabled log when `dir` is empty. Otherwise creates `dir` and a new file
  // audit_<UTC time>_rank<r>_<pid>.log in it (with a _<n> suffix before .log when another
  // loader of this process made that name already); throws Error(io) when it cannot.
  AuditLog(const std::filesystem::path& dir, long rank);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  bool enabled() const noexcept { return file_ != nullptr; }
  const std::filesystem::path& path() const noexcept { return path_; }

  // Appends `action=<action> | key=value | ...`; values holding spaces, commas, '|', '=',
  // '"', '\\' or control characters are double-quoted, with '"' and '\\' backslash-escaped
  // and control characters written as \n, \r, \t or \xHH: one event is always one line.
  // Write errors are reported once through the log hook, not thrown: the audit trail must
  // not stop training.
  void write(std::string_view action, const Fields& fields);

 private:
  Mutex mutex_;
  // Set by the constructor, then constant: the stream it points to is written under mutex_.
  std::FILE* file_ TF_PT_GUARDED_BY(mutex_) = nullptr;
  bool write_failed_ TF_GUARDED_BY(mutex_) = false;
  std::filesystem::path path_;
};

// audit_value_text and audit_name_text, the quoting write() applies to a line's fields, are
// public (tokenfeed/audit.hpp), beside the reader that undoes them.

// "[1, 2, 3]" for the audit log and messages.
std::string format_id_list(const std::vector<std::uint64_t>& ids);

}  // namespace tokenfeed
