// prepare_chat_dataset: JSONL conversations -> an episode-indexed SFT dataset (what
// `tokenfeed prepare` runs; docs/preparing-data.md).
//
// Output layout under output_dir:
//   train/shard_NNNNN/{tokens.bin, mask.bin, episodes.idx}   (EpisodeDatasetWriter)
//   val/shard_NNNNN/...
//   (a split without episodes is not written: the loader treats val/ as optional)
//   dataset_metadata.json   format version, dtypes, vocab size, special token ids, per-split
//                           counts, source file name and SHA-256, skipped lines per reason,
//                           the tokenfeed version
//   tokenizer_state.json    tokenizer kind, canonical model path and SHA-256, special tokens
// The train split must hold at least one episode (else nothing is written: the loader could
// not open the result); an empty val split is fine.
// Everything is written into a temporary sibling directory that is flushed to disk and renamed
// to output_dir at the end (StagingDir, staging_dir.hpp), so an interrupted or failed run never
// leaves output_dir looking complete; the temporary directories of earlier runs that were
// killed are removed first.
//
// Each conversation becomes one episode: its serialized ids (chat_format.hpp) and the
// assistant-only mask. Episodes keep the input order within each split. The split of a
// conversation depends only on its content and the seed (split_is_val), so rerunning or
// appending lines never moves a conversation between splits.
//
// Memory is bounded by the number of batches in flight, whatever the input size; lines are
// parsed and tokenized on all cores (oneTBB) and written in input order.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/export.hpp"
#include "tokenfeed/special_tokens.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed {

enum class OnBadLine : std::uint8_t {
  fail,  // stop at the first bad line with its number and reason
  skip,  // count it per reason and go on
};

struct PrepareProgress {
  std::uint64_t input_bytes_read = 0;   // raw (compressed for gzip) bytes consumed
  std::uint64_t input_bytes_total = 0;  // 0 when unknown
  std::uint64_t lines = 0;              // lines processed (written, skipped or blank)
  std::uint64_t tokens = 0;             // tokens written
  double seconds = 0;                   // since the start
  bool done = false;                    // the call at the end
};

struct PrepareOptions {
  std::filesystem::path input;       // JSONL, optionally gzip-compressed
  std::filesystem::path output_dir;  // must not exist, or be an empty directory
  // "bytes" or "sentencepiece:MODEL"; unused for pre-tokenized input.
  std::string tokenizer = "bytes";
  SpecialTokenStrings special_strings;  // the tokenizer's special token strings
  // When set, the input is pre-tokenized ("ids" instead of "content") and this file gives the
  // special token ids, the default system ids and the vocabulary size.
  std::optional<std::filesystem::path> special_tokens_file;
  double val_split = 0.1;                    // fraction of conversations in val, in [0, 1)
  std::uint64_t seed = 0;                    // split seed
  std::uint64_t shard_tokens = 100'000'000;  // max tokens per shard (0: one shard per split)
  std::optional<TokenDtype> token_dtype;     // nullopt: uint16 when the vocabulary fits, else uint32
  // Content of the injected system turn for text input; nullopt: kDefaultSystemText. Setting it
  // with special_tokens_file is an error (pre-tokenized input takes default_system_ids there).
  std::optional<std::string> system_text;
  OnBadLine on_error = OnBadLine::fail;
  std::size_t max_line_bytes = std::size_t{64} << 20;  // longer lines are bad lines (line_too_long)
  std::size_t batch_bytes = std::size_t{1} << 20;      // input bytes per parallel work item
  int threads = 0;                                     // 0: all cores
  // Called from one thread at most every progress_interval_seconds, and once at the end.
  std::function<void(const PrepareProgress&)> on_progress;
  double progress_interval_seconds = 0.1;
  // When set and it becomes true (e.g. from a signal handler: it is only loaded), the run stops
  // within one batch of lines, removes its temporary directory and throws PrepareInterrupted.
  // Once the output has been renamed into place the run counts as complete and returns.
  const std::atomic<bool>* stop_requested = nullptr;
};

// Thrown by prepare_chat_dataset when options.stop_requested became true; nothing is left at
// output_dir.
class TOKENFEED_API PrepareInterrupted : public Error {
 public:
  PrepareInterrupted() : Error(ErrorKind::pipeline, "prepare was interrupted; its temporary output was removed") {}
};

struct SkippedLines {
  std::uint64_t count = 0;
  std::uint64_t first_line = 0;  // 1-based line number of the first one
  std::string first_detail;
};

struct PrepareSummary {
  std::uint64_t lines = 0;          // physical lines read
  std::uint64_t blank_lines = 0;    // empty or whitespace-only lines, ignored
  std::uint64_t conversations = 0;  // episodes written (train + val)
  std::uint64_t skipped_total = 0;
  std::map<std::string, SkippedLines> skipped;  // by reason key
  EpisodeDatasetWriterSummary train, val;
  TokenDtype token_dtype = TokenDtype::uint32;
  std::uint32_t vocab_size = 0;
  SpecialTokenIds special;
  std::uint64_t input_bytes = 0;
  std::string input_sha256;
  double seconds = 0;
  std::vector<std::filesystem::path> removed_stale_dirs;  // temporary dirs of killed earlier runs
};

// Runs the preparation. Throws Error(config) for bad options, Error(io) for files that cannot
// be read or written, Error(format) for the first bad line under OnBadLine::fail, with a
// message "INPUT:LINE: REASON: DETAIL", or when no conversation lands in train, and
// PrepareInterrupted when stopped. Nothing is left at output_dir on failure.
TOKENFEED_API PrepareSummary prepare_chat_dataset(const PrepareOptions& options);

}  // namespace tokenfeed
