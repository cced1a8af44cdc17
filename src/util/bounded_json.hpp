// Parsing JSON from outside (resume states, dataset_metadata.json, JSONL lines, special-token
// files) with bounded depth, and quoting a parsed value in an error message with bounded size.
//
// nlohmann's parser is iterative, but dump() and comparisons recurse: a value nested tens of
// thousands deep would overflow the stack the first time a message echoed it. Every parse of
// outside input goes through parse_bounded_json, which rejects nesting deeper than
// kMaxJsonDepth, and every message that quotes outside input goes through quote_json.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <functional>
#include <istream>
#include <stdexcept>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tokenfeed {

// Arrays and objects may nest this deep (the top-level value is depth 1). tokenfeed's own
// documents nest at most 4 deep.
inline constexpr std::size_t kMaxJsonDepth = 64;

// Thrown by parse_bounded_json for invalid JSON or too deep nesting. what() is the reason,
// without nlohmann's "[json.exception...]" prefix, at most about 300 bytes.
class JsonParseError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Decides whether an object member is kept: called with the depth of the object holding the
// key (1 for the top-level object) and the key. A member that is not kept is parsed (so the
// text must still be valid JSON) but never stored, so it costs no memory.
using JsonKeyFilter = std::function<bool(std::size_t depth, std::string_view key)>;

nlohmann::json parse_bounded_json(std::string_view text, const JsonKeyFilter& keep = {});
nlohmann::json parse_bounded_json(std::istream& in);

// A short quotation of `value` for an error message: scalars as JSON (strings cut to
// `max_chars`, with "..."), arrays and objects by type and size.
std::string quote_json(const nlohmann::json& value, std::size_t max_chars = 80);

}  // namespace tokenfeed
