// tokenfeed::Error: the one exception type the public API throws.
//
// Every message names what failed and where (the file and record, the config key, the
// state field) so that it can be shown to a user as it is. The kind lets bindings map
// errors naturally (config -> ValueError, io/format -> OSError in Python).
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

#include "tokenfeed/export.hpp"

namespace tokenfeed {

enum class ErrorKind {
  config,    // a bad configuration key or value, malformed XML
  io,        // a file or directory that cannot be opened, read or written
  format,    // a file whose content is invalid (sizes, index records, headers)
  state,     // a resume state that is malformed or belongs to another dataset/config
  usage,     // an API call made in a state where it is not allowed
  pipeline,  // a failure inside a background stage that is not one of the above
};

// Returns "config", "io", ... for messages and bindings.
TOKENFEED_API const char* to_string(ErrorKind kind) noexcept;

class TOKENFEED_API Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

// The Error (kind io) for a std::filesystem failure: "cannot access 'PATH': REASON" (the
// system's reason, such as "Too many levels of symbolic links"). The library's entry
// points throw this for whatever std::filesystem threw under them; the command and the
// Python module turn one that reaches them anyway into it.
TOKENFEED_API Error io_error_of(const std::filesystem::filesystem_error& e);

}  // namespace tokenfeed
