// shortest_text: the shortest decimal text that reads back as the same double (1e-09, 0.1,
// 2.5), where std::to_string would print six fixed decimals (0.000000). For messages and
// texts a config or a log records exactly.
//
// Thread-safety: a pure function.
#pragma once

#include <charconv>
#include <string>

namespace tokenfeed {

inline std::string shortest_text(double value) {
  char text[32];  // the longest double, -2.2250738585072014e-308, fits
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::string(text, end);
}

}  // namespace tokenfeed
