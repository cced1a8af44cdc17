// The config parser's reading of a value's text, for the schemas of what lies outside the
// key table (mixture_schema, stage_list): a stage's until_step, a mixture's temperature, a
// source's max_epochs are read by the same checks as the keys.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <string_view>

namespace tokenfeed {

// `text` without surrounding whitespace (spaces, tabs, line ends), as every key reads it.
std::string_view trim_config_text(std::string_view text);

// `text`, surrounding whitespace ignored, as an integer. Throws Error(config) when it is not
// one: "config key 'KEY': expected an integer, got 'TEXT'".
std::int64_t parse_config_int(std::string_view key, std::string_view text);

// `text`, surrounding whitespace ignored, as a finite decimal number ("0.3", "4", "2.5e1").
// Throws Error(config) when it is not one: "config key 'KEY': expected a number, got 'TEXT'".
double parse_config_number(std::string_view key, std::string_view text);

}  // namespace tokenfeed
