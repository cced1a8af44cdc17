// EpisodeDatasetWriter: writes one split of an episode-indexed dataset
// (`tokens.bin`, `mask.bin`, `episodes.idx`, in shards `shard_00000/`, ...).
//
// Episodes are written in the order they are added; episode ids are that order.
// A new shard starts when adding an episode would take the current shard past
// `shard_tokens` tokens (an episode is never split across shards).
//
// Thread-safety: not thread-safe; one writer per split directory, used by one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>

#include "tokenfeed/dtype.hpp"
#include "tokenfeed/export.hpp"

namespace tokenfeed {

struct EpisodeDatasetWriterOptions {
  TokenDtype token_dtype = TokenDtype::uint32;
  bool write_mask = true;               // write mask.bin (uint8 0/1) beside tokens.bin
  std::uint64_t shard_tokens = 0;       // max tokens per shard; 0 means one shard
};

struct EpisodeDatasetWriterSummary {
  std::uint64_t episodes = 0;
  std::uint64_t tokens = 0;
  std::uint64_t masked_tokens = 0;      // tokens whose mask is non-zero
  std::uint64_t shards = 0;
};

class TOKENFEED_API EpisodeDatasetWriter {
 public:
  // Creates `split_dir` (and parents) if needed. Throws Error(io) if it cannot.
  EpisodeDatasetWriter(std::filesystem::path split_dir, EpisodeDatasetWriterOptions options);
  ~EpisodeDatasetWriter();  // finishes if finish() was not called; errors are swallowed there
  EpisodeDatasetWriter(const EpisodeDatasetWriter&) = delete;
  EpisodeDatasetWriter& operator=(const EpisodeDatasetWriter&) = delete;

  // REQUIRES: mask.size() == tokens.size() when write_mask, else mask is ignored.
  // Throws Error(format) when a token does not fit token_dtype, Error(io) on write failure.
  void add(std::span<const std::uint32_t> tokens, std::span<const std::uint8_t> mask);

  // Flushes and closes the files; returns what was written. Idempotent.
  EpisodeDatasetWriterSummary finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenfeed
