// DatasetMetadata: what a dataset's optional `dataset_metadata.json` says about it.
//
// Only the fields the loader uses are read; the rest of the file is kept opaque.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>

#include "tokenfeed/special_tokens.hpp"
#include "tokenfeed/dtype.hpp"

namespace tokenfeed {


struct DatasetMetadata {
  bool present = false;  // false when the dataset has no dataset_metadata.json
  std::optional<TokenDtype> token_dtype;
  std::optional<MaskDtype> mask_dtype;
  std::optional<std::int64_t> eot_token_id;
  std::optional<std::int64_t> eos_token_id;
  std::optional<std::int64_t> pad_token_id;  // what `prepare` and the Python writer record
  std::optional<std::int64_t> vocab_size;
  std::optional<SpecialTokenIds> special_tokens;  // the chat template's ids, as `prepare` records them
  // "content_sha256": shard (relative to the dataset directory) -> file name -> hex SHA-256
  // (dataset/content_checksum.hpp); empty when not recorded.
  std::map<std::string, std::map<std::string, std::string>> content_sha256;
};

// Reads `dataset_dir/dataset_metadata.json` if it exists. Throws Error(format) naming the
// file and field when it is not valid JSON or a field has the wrong type or value.
// Every reader of a dataset directory (the loader, RL prompts, `tokenfeed inspect`) starts
// here, so this is also where a directory that is no finished dataset is refused: first,
// Error(io) for the staging directory of a killed or running prepare or writer
// (io/staging_dir.hpp: refuse_staging_dir).
DatasetMetadata read_dataset_metadata(const std::filesystem::path& dataset_dir);

}  // namespace tokenfeed
