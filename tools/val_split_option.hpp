// The --val-split check of the prepare commands: a fraction in [0, 1), since the train split
// must keep something (a dataset without train cannot be loaded).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>

namespace tokenfeed::cli {

// `what`: the records the commands split ("conversations", "documents"), for the message.
inline CLI::Validator val_split_validator(const std::string& what) {
  return CLI::Validator(
      [what](const std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end != '\0' || !(v >= 0.0 && v < 1.0)) {
          return "Value " + value + " not in [0, 1) (train needs " + what + ")";
        }
        return {};
      },
      "FLOAT in [0, 1)");
}

}  // namespace tokenfeed::cli
