#include "tokenfeed/error.hpp"

namespace tokenfeed {

const char* to_string(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::config: return "config";
    case ErrorKind::io: return "io";
    case ErrorKind::format: return "format";
    case ErrorKind::state: return "state";
    case ErrorKind::usage: return "usage";
    case ErrorKind::pipeline: return "pipeline";
  }
  return "unknown";
}

Error::Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}

Error io_error_of(const std::filesystem::filesystem_error& e) {
  std::string where;
  if (!e.path1().empty()) where = " '" + e.path1().string() + "'";
  if (!e.path2().empty()) where += " or '" + e.path2().string() + "'";
  return Error(ErrorKind::io,
               "cannot access" + (where.empty() ? std::string(" a file") : where) + ": " + e.code().message());
}

}  // namespace tokenfeed
