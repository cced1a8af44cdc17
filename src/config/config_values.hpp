// The config parser's reading of a value's text, for what takes a key's value outside the
// key table: a mixture stage's until_step given in a Python dict is read by the same check
// as the XML's <stage until_step="N">, and a mixture_temperature or max_epochs as the XML's
// <mixture temperature="A"> and <source max_epochs="E">.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string_view>

namespace tokenfeed {

// `text`, surrounding whitespace ignored, as an integer. Throws Error(config) when it is not
// one: "config key 'KEY': expected an integer, got 'TEXT'".
std::int64_t parse_config_int(std::string_view key, std::string_view text);

// `text`, surrounding whitespace ignored, as a finite decimal number ("0.3", "4", "2.5e1").
// Throws Error(config) when it is not one: "config key 'KEY': expected a number, got 'TEXT'".
double parse_config_number(std::string_view key, std::string_view text);

}  // namespace tokenfeed
