// prepare_text_corpus: raw text to a pretraining dataset (the library side of `tokenfeed
// prepare-text` and of the Python package's prepare_text).
//
// Input: files (text_inputs.hpp) read in order, each record a document, an empty document
// (skipped, counted) or a bad line (OnBadLine: fail naming file and line, or skip and count).
// Each document becomes [bos] + the tokenizer's ids + [eos] (bos when asked, eos unless
// turned off), goes to train or val by a hash of its bytes and the seed (text_split_point),
// and is appended to that split's shards (corpus_shards.hpp) in input order.
//
// Output under output_dir:
//   train/, val/             the shards (CorpusFormat tokens or episodes); val/ only when it
//                            has a document
//   dataset_metadata.json    the loader's fields (token_dtype, vocab_size, eos_token_id, and
//                            pad_token_id = eos for episodes), then bos_token_id, the
//                            tokenizer's identity, per split documents, tokens,
//                            empty_documents, skipped_lines and shards, skipped lines per
//                            reason, the inputs, and the shards' content_sha256
//
// All or nothing: everything is written into a staging directory (io/staging_dir.hpp)
// renamed to output_dir at the end. Restartable: whenever a shard is finished, the staging
// directory's prepare_text_manifest.json records where the input and every split stand; a
// run killed (or interrupted) after hours and started again with `resume` takes over that
// directory when its inputs and options are the same (the manifest's run key), keeps every
// finished shard, and goes on from there, giving the same bytes as a run never stopped.
// Without `resume` a killed run's staging directory is removed, as prepare does.
//
// Parallel: documents are read in chunks, parsed and tokenized by `workers` threads (the
// caller's encoder: one call per chunk, in order, which may parallelize inside), and written
// in input order; the output does not depend on the number of workers. Memory is bounded by
// the chunks in flight (about 4 per worker, batch_bytes of text each, and their ids) plus a
// parquet row group, whatever the corpus size.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "prepare/corpus_shards.hpp"
#include "prepare/prepare.hpp"
#include "prepare/text_inputs.hpp"
#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

// Turns texts into ids: a tokenizer the caller brings (the Python package's Hugging Face one).
class DocumentEncoder {
 public:
  virtual ~DocumentEncoder() = default;
  // Sets ids[i] to the ids of texts[i] (no special tokens added). Called from one thread at a
  // time, in input order. Throws Error for a text it cannot encode (the whole run fails).
  virtual void encode(std::span<const std::string_view> texts, std::vector<std::vector<std::uint32_t>>& ids) = 0;
};

// What the caller's encoder is, for the records and the manifest's run key.
struct EncoderIdentity {
  std::string kind;          // e.g. "huggingface"
  std::string model_path;    // e.g. the tokenizer.json
  std::string model_sha256;  // hex
  std::string version;       // of the library that encodes, e.g. "tokenizers 0.21.0"
  std::uint64_t vocab_size = 0;
  std::optional<std::uint32_t> eos_id, bos_id;  // resolved by the caller
  std::optional<std::string> eos_token, bos_token;
};

struct PrepareTextProgress {
  std::uint64_t input_bytes_read = 0;   // raw (compressed) bytes of the inputs consumed
  std::uint64_t input_bytes_total = 0;  // of all inputs
  std::uint64_t documents = 0;          // written
  std::uint64_t tokens = 0;             // written
  double seconds = 0;                   // since the start
  bool done = false;                    // the last call
};

// A progress line: on a terminal a bar (to be printed after '\r'), else a plain line, with
// documents/s, tokens/s, MB/s and the ETA from bytes read.
std::string format_text_progress(const PrepareTextProgress& p, bool terminal);

struct PrepareTextOptions {
  std::vector<std::string> inputs;   // paths or globs (expand_text_inputs)
  std::filesystem::path output_dir;  // must not exist, or be an empty directory
  CorpusFormat format = CorpusFormat::tokens;
  TextReadOptions read;  // text field, doc-per, document size limit, parquet opener

  // The tokenizer: the built-in one named by `tokenizer` ("bytes" or "sentencepiece:MODEL"),
  // or, when set, `encoder` described by `encoder_identity`.
  std::string tokenizer = "bytes";
  std::shared_ptr<DocumentEncoder> encoder;
  EncoderIdentity encoder_identity;
  // Built-in tokenizer: the end-of-text token (nullopt: the model's own; bytes: its eot).
  std::optional<std::string> eos_token;
  bool append_eos = true;
  bool prepend_bos = false;

  double val_split = 0.0005;                            // fraction of documents in val, in [0, 1)
  std::uint64_t seed = 0;                               // split seed
  std::uint64_t shard_tokens = std::uint64_t{1} << 28;  // most tokens per shard, > 0
  std::optional<TokenDtype> token_dtype;                // nullopt: uint16 when the vocabulary fits, else uint32
  OnBadLine on_error = OnBadLine::fail;
  std::size_t batch_bytes = std::size_t{1} << 20;  // text per chunk
  int workers = 0;                                 // 0: all cores; at most the cores
  bool resume = false;

  std::function<void(const PrepareTextProgress&)> on_progress;  // from one thread at a time
  double progress_interval_seconds = 0.5;
  // When it becomes true, the run stops within a chunk and throws PrepareInterrupted; the
  // staging directory is kept, for a run with `resume` to go on from its last finished shard.
  const std::atomic<bool>* stop_requested = nullptr;
};

struct CorpusSplitSummary {
  std::uint64_t documents = 0;
  std::uint64_t tokens = 0;
  std::uint64_t empty_documents = 0;
  std::uint64_t skipped_lines = 0;
  std::uint64_t shards = 0;
};

struct PrepareTextSummary {
  CorpusSplitSummary train, val;
  std::map<std::string, SkippedLines> skipped;  // by reason (SkippedLines.first_detail names file and line)
  std::uint64_t blank_lines = 0;                // blank JSONL lines, ignored
  std::uint64_t input_files = 0;
  std::uint64_t input_bytes = 0;
  TokenDtype token_dtype = TokenDtype::uint16;
  std::uint64_t vocab_size = 0;
  std::optional<std::uint32_t> eos_id, bos_id;
  std::uint64_t shards_reused = 0;  // finished shards kept from a resumed run
  bool resumed = false;
  double seconds = 0;
  std::vector<std::filesystem::path> removed_stale_dirs;
};

// Runs it. Throws Error(config) for bad options (naming the option), Error(io) for files that
// cannot be read or written, Error(format) for the first bad line under OnBadLine::fail
// ("FILE:LINE: REASON: DETAIL") or when no document lands in train, PrepareInterrupted when
// stopped. Nothing is left at output_dir on failure.
PrepareTextSummary prepare_text_corpus(const PrepareTextOptions& options);

// The split rule: SHA-256 over "tokenfeed-text-split-v1\0", the seed (8 bytes little-endian)
// and the document's bytes; the first 8 digest bytes, big-endian, shifted right by 11 and
// scaled by 2^-53, give u in [0, 1); val when u < val_split.
double text_split_point(std::string_view text, std::uint64_t seed);

}  // namespace tokenfeed
