// DatasetMetadata: what a dataset's optional `dataset_metadata.json` says about it, and the
// one reader and writer of that file (tokenfeed prepare, EpisodeDatasetWriter's checksums
// and the Python package's write_dataset_metadata all write through write_dataset_metadata).
//
// Only the fields the loader uses are read; the rest of the file is kept opaque, in order.
//
// Thread-safety: free functions; a writer must not race another writer of the same file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

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

// The whole of `dataset_dir/dataset_metadata.json`, fields in file order; an empty object
// when the file is absent. Throws Error(io) for an unreadable file and Error(format) when
// it is not a JSON object.
nlohmann::ordered_json read_dataset_metadata_document(const std::filesystem::path& dataset_dir);

// The chat template's ids as the metadata (and tokenizer_state.json) record them:
// {"system", "user", "assistant", "tool" (null when absent), "eot"}.
nlohmann::ordered_json special_tokens_json(const SpecialTokenIds& ids);

// The fields the loader reads, each only when set, in the order the writers record them:
// format_version (1), token_dtype, mask_dtype, vocab_size, eot_token_id, eos_token_id,
// pad_token_id, then `special_tokens` unless null (special_tokens_json, or the caller's own
// form). content_sha256 is left to the caller (or to the writer's keep option).
nlohmann::ordered_json dataset_metadata_fields(const DatasetMetadata& fields,
                                               const nlohmann::ordered_json& special_tokens);

struct MetadataWriteOptions {
  // When `doc` has no content_sha256, keep the one a readable existing file records
  // (after the fields of `doc`, before `extra`).
  bool keep_recorded_checksums = false;
  // Non-ASCII characters as \uXXXX escapes (what Python's json.dump writes); else UTF-8.
  bool ascii = false;
};

// Writes `dataset_dir/dataset_metadata.json` (creating dataset_dir): `doc`, then the fields
// of `extra` (a key already in `doc` keeps its place and takes extra's value), as JSON
// indented by 2 with a final newline, to a temporary name renamed over the file, so that a
// reader never sees half of it. The result is first read as read_dataset_metadata reads it:
// a file the loader would refuse is never written (Error(format) naming the field). Throws
// Error(io) when the file cannot be written.
void write_metadata_document(const std::filesystem::path& dataset_dir, nlohmann::ordered_json doc,
                             const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
                             const MetadataWriteOptions& options = {});

}  // namespace tokenfeed
