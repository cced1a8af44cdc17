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

}  // namespace tokenfeed
