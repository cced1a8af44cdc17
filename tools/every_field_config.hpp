// The config of the commands that read batches for themselves (dump, show and run; inspect's
// mixture report is the library's, which chooses every field itself): the file's, with
// every field chosen. Its `fields` key is a trainer's
// choice (docs/batch-contract.md, "Choosing the fields"); these commands read every field.
#pragma once

#include <string>

#include "tokenfeed/config.hpp"

namespace tokenfeed::cli {

inline Config config_reading_every_field(const std::string& file) {
  Config config = load_config_file(file);
  config.fields = kEveryBatchField;
  return config;
}

}  // namespace tokenfeed::cli
