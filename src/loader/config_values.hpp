// The config parser's reading of a value's text, for what takes a key's value outside the
// key table: a mixture stage's until_step given in a Python dict is read by the same check
// as the XML's <stage until_step="N">.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string_view>

namespace tokenfeed {

// `text`, surrounding whitespace ignored, as an integer. Throws Error(config) when it is not
// one: "config key 'KEY': expected an integer, got 'TEXT'".
std::int64_t parse_config_int(std::string_view key, std::string_view text);

}  // namespace tokenfeed
