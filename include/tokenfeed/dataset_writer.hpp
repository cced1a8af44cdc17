// EpisodeDatasetWriter: writes one split of an episode-indexed dataset
// (`tokens.bin`, `mask.bin`, `episodes.idx`, in shards `shard_00000/`, ...).
//
// Episodes are written in the order they are added; episode ids are that order.
// A new shard starts when adding an episode would take the current shard past
// `shard_tokens` tokens (an episode is never split across shards).
//
// All or nothing: the shards are written into a hidden temporary directory beside
// `split_dir` (`.NAME.tmp-PID-RANDOM` in its parent), which finish() flushes to disk and
// renames to `split_dir` (then flushes the parent), so that a crash leaves either no new
// split or a complete one. Until then `split_dir` is untouched, so a loader never sees a
// half-written split, and a writer that is discarded (discard(), or destroyed without
// finish()) removes what it wrote and leaves nothing behind. A writer killed outright
// (SIGKILL) cannot: the next writer of the same `split_dir` removes the staging directory
// it left (once its process is gone and nobody holds its lock), and a loader or
// `tokenfeed inspect` refuses a dataset whose train split exists only as a staging directory.
//
// An existing `split_dir` must be empty: a split written over an older one would keep
// the old shards the new one does not replace, and the loader would read both. With
// `overwrite`, finish() replaces a non-empty `split_dir` instead (the old files are
// removed only once the new split is complete and in place).
//
// Thread-safety: not thread-safe; one writer per split directory, used by one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "tokenfeed/dtype.hpp"
#include "tokenfeed/export.hpp"

namespace tokenfeed {

struct EpisodeDatasetWriterOptions {
  TokenDtype token_dtype = TokenDtype::uint32;
  bool write_mask = true;               // write mask.bin (uint8 0/1) beside tokens.bin
  std::uint64_t shard_tokens = 0;       // max tokens per shard; 0 means one shard
  bool overwrite = false;               // finish() replaces a non-empty split_dir instead of refusing it
  // finish() records the SHA-256 of each shard's files under "content_sha256" in the
  // dataset_metadata.json beside split_dir (created when absent, other fields kept), for
  // `tokenfeed inspect --deep` to verify. false leaves the metadata to the caller.
  bool record_checksums = true;
};

struct EpisodeDatasetWriterSummary {
  std::uint64_t episodes = 0;
  std::uint64_t tokens = 0;
  std::uint64_t masked_tokens = 0;      // tokens whose mask is non-zero
  std::uint64_t shards = 0;
};

class TOKENFEED_API EpisodeDatasetWriter {
 public:
  // Creates the parent of `split_dir` (and its parents) and the temporary directory.
  // Throws Error(io) if it cannot, or if `split_dir` exists and is not an empty
  // directory (unless options.overwrite, when it must still be a directory).
  EpisodeDatasetWriter(std::filesystem::path split_dir, EpisodeDatasetWriterOptions options);
  ~EpisodeDatasetWriter();  // discard() unless finish() succeeded; never throws
  EpisodeDatasetWriter(const EpisodeDatasetWriter&) = delete;
  EpisodeDatasetWriter& operator=(const EpisodeDatasetWriter&) = delete;

  // REQUIRES: mask.size() == tokens.size() when write_mask, else mask is ignored.
  // Throws Error(format) when a token does not fit token_dtype, Error(io) on write failure,
  // Error(usage) after finish() or discard().
  void add(std::span<const std::uint32_t> tokens, std::span<const std::uint8_t> mask);

  // Flushes and closes the files and moves the split into `split_dir`; returns what was
  // written. Idempotent once it succeeded. On failure (a write error, or `split_dir`
  // having become non-empty meanwhile without overwrite) it throws Error(io), the
  // temporary directory is removed and the writer is discarded. With record_checksums, a
  // dataset_metadata.json beside the split that cannot be read or replaced makes it throw
  // Error(io) or Error(format) after the split is in place (finished() is then true).
  EpisodeDatasetWriterSummary finish();

  // Abandons the split: removes the temporary directory and everything written into it;
  // `split_dir` stays as it was. Does nothing after finish() succeeded (the split is then
  // in place) or a previous discard(). Never throws.
  void discard() noexcept;

  // True once finish() succeeded.
  bool finished() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The fields of a dataset_metadata.json (the loader reads all but extra_json).
struct DatasetMetadataFields {
  std::optional<TokenDtype> token_dtype;
  std::optional<MaskDtype> mask_dtype;
  std::optional<std::int64_t> vocab_size;
  std::optional<std::int64_t> eot_token_id;  // the default pad id and end-of-text id
  std::optional<std::int64_t> eos_token_id;
  std::optional<std::int64_t> pad_token_id;
  // The chat template's ids, a JSON object ({"system": 3, "user": 4, ...}, in the order
  // given); empty: not recorded.
  std::string special_tokens_json;
  // Further fields, a JSON object written after the ones above in its order; a field
  // named above takes this value in its place.
  std::string extra_json = "{}";
  // Keep the content_sha256 that an existing, readable file records (EpisodeDatasetWriter's
  // checksums), unless extra_json gives it.
  bool keep_recorded_checksums = true;
  // Write non-ASCII characters as \uXXXX escapes (as Python's json.dump does); else UTF-8.
  bool ascii = false;
};

// Writes `dataset_dir/dataset_metadata.json` (creating dataset_dir): format_version 1, the
// fields set above in that order, the kept checksums, then the extra fields; indented by 2,
// written to a temporary name and renamed. The file is checked as the loader reads it
// first, so one the loader would refuse is never written. Returns its path. Throws
// Error(format) for invalid JSON in the text fields or a field the loader would refuse,
// Error(io) when the file cannot be written.
TOKENFEED_API std::filesystem::path write_dataset_metadata(const std::filesystem::path& dataset_dir,
                                                           const DatasetMetadataFields& fields);

}  // namespace tokenfeed
