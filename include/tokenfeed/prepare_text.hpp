// prepare_text_corpus: raw text to a pretraining dataset (what `tokenfeed prepare-text` and
// the Python package's prepare_text run; docs/pretraining.md).
//
// Input: files (expand_text_inputs, below) read in order, each record a document, an empty
// document (skipped, counted) or a bad line (OnBadLine: fail naming file and line, or skip
// and count). Each document becomes [bos] + the tokenizer's ids + [eos] (bos when asked, eos
// unless turned off), goes to train or val by a hash of its bytes and the seed (the rule is
// in docs/pretraining.md), and is appended to that split's shards in input order.
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
// All or nothing: everything is written into a staging directory renamed to output_dir at
// the end. Restartable: the staging directory's prepare_text_manifest.json records the run
// once, and whenever a shard is finished a line appended to its prepare_text_shards.jsonl
// records that shard and where the input and every split stand; a run killed (or interrupted) after hours and started
// again with `resume` takes over that directory when its inputs and options are the same (the manifest's run key),
// keeps every finished shard, and goes on from there, giving the same bytes as a run never stopped. Without `resume` a
// killed run's staging directory is removed, as prepare does.
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

#include "tokenfeed/dtype.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/export.hpp"
#include "tokenfeed/prepare.hpp"

namespace tokenfeed {

// The input files' formats, by file name: jsonl (*.jsonl, *.json, *.ndjson: one JSON object a
// line, the document its text field), parquet (*.parquet: the text column, read by row group
// through a ParquetTextReader the caller supplies), text (anything else: plain UTF-8, one
// document per file, line or run of lines between empty lines, as DocPer says). A .gz or .zst
// suffix is decompressed, whatever the format.
enum class TextInputFormat : std::uint8_t { jsonl, parquet, text };
enum class DocPer : std::uint8_t { file, line, blank_line };

TOKENFEED_API const char* to_string(TextInputFormat format) noexcept;
TOKENFEED_API const char* to_string(DocPer doc_per) noexcept;
// "file", "line", "blank-line". Throws Error(config) naming --doc-per for anything else.
TOKENFEED_API DocPer parse_doc_per(std::string_view text);

struct TextInputFile {
  std::filesystem::path path;
  TextInputFormat format = TextInputFormat::text;
  std::uint64_t bytes = 0;    // size on disk
  std::int64_t mtime_ns = 0;  // modification time, for the resume manifest
  // The part of the file read: the lines (of JSONL, or of text with DocPer::line) that start
  // in the byte range [begin, end) (a task's share of a large uncompressed file, --task).
  // The whole file by default.
  std::uint64_t begin = 0;
  std::uint64_t end = UINT64_MAX;
  bool whole() const noexcept { return begin == 0 && end == UINT64_MAX; }
};

// The format of `path` by its name (see above).
TOKENFEED_API TextInputFormat text_input_format(const std::filesystem::path& path);

// Every file each pattern names: a path, or a glob (*, ?, [...]) matched by glob(3). All
// matches of all patterns, sorted by path (bytewise), each once. Throws Error(config) for a
// pattern that matches nothing or an empty list, Error(io) for a match that is not a regular
// file (a directory, a FIFO).
TOKENFEED_API std::vector<TextInputFile> expand_text_inputs(const std::vector<std::string>& patterns);

// Reads the rows of a parquet file's text column. Supplied by the caller (the Python package).
class TOKENFEED_API ParquetTextReader {
 public:
  virtual ~ParquetTextReader() = default;
  // The next rows' values: a string, or nullopt for null or a value that is not a string.
  // Returns false at the end of the file.
  virtual bool next_batch(std::vector<std::optional<std::string>>& rows) = 0;
  // Bytes of the file read so far (compressed column chunks), for progress.
  virtual std::uint64_t bytes_read() const = 0;
};
// Opens `path` at row `first_row` (0-based). Throws Error(format) naming the file when it has
// no such column or the column holds no strings.
using ParquetOpener = std::function<std::unique_ptr<ParquetTextReader>(
    const std::filesystem::path& path, const std::string& column, std::uint64_t first_row)>;

struct TextReadOptions {
  std::string text_field = "text";
  DocPer doc_per = DocPer::file;
  // A document whose text (for JSONL, decoded from its JSON string) is longer is a bad line
  // (document_too_long); a JSONL line is read up to 6 x this + 1 MiB, a plain-text line up
  // to this, and a longer one is document_too_long without being held in memory.
  std::size_t max_document_bytes = std::size_t{64} << 20;
  ParquetOpener open_parquet;  // required for parquet input
};

// The output's layout: token-stream shards with document offsets, or episodes.
enum class CorpusFormat : std::uint8_t { tokens, episodes };
TOKENFEED_API const char* to_string(CorpusFormat format) noexcept;

enum class ResumeCheck : std::uint8_t { stat, content };
TOKENFEED_API const char* to_string(ResumeCheck check) noexcept;

// Turns texts into ids: a tokenizer the caller brings (the Python package's Hugging Face one).
class TOKENFEED_API DocumentEncoder {
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
TOKENFEED_API std::string format_text_progress(const PrepareTextProgress& p, bool terminal);

// One of `count` tasks that prepare a corpus together (prepare-text --task I --num-tasks N;
// docs/pretraining.md): the inputs are cut into units, whole files, and byte ranges of at
// most max_part_bytes of a larger uncompressed file of lines (JSONL, or text with DocPer::line;
// a line belongs to the range its first byte is in), and task `index` prepares a contiguous
// run of them, the same for any task given the same inputs and options, into
// output_dir/parts/INDEX/ (its own staging, manifest and resume). merge_text_parts then makes
// the dataset. Tasks share nothing but the output directory.
struct PrepareTextTask {
  std::uint32_t index = 0;
  std::uint32_t count = 1;
  std::uint64_t max_part_bytes = 0;  // 0: the inputs' total bytes / count, rounded up
};

// The task of this process from its scheduler's environment (--task auto): a Slurm array's
// SLURM_ARRAY_TASK_ID (less SLURM_ARRAY_TASK_MIN when set) and SLURM_ARRAY_TASK_COUNT, or a
// Kubernetes indexed Job's JOB_COMPLETION_INDEX with `count` (which Slurm's count must equal
// when given). Throws Error(config) naming the variable when neither is set, a value is not
// a number, the count is missing or the index is not below the count.
TOKENFEED_API PrepareTextTask text_task_from_environment(std::optional<std::uint32_t> count);

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
  // With a built-in tokenizer: a second encoder (the `tokenizers` package, for hf-bpe:) that
  // encodes the fraction verify_fraction of the documents again, chosen by a hash of their
  // bytes and the seed (the split rule's digest, other bytes of it: prepare_text.hpp), so the
  // same documents for the same input. The run stops with Error(format) naming the document's
  // file and line at the first document whose ids differ. 0 or no encoder: nothing verified.
  // Not with `encoder` (Error(config)). The default is the commands' --verify-sample.
  std::shared_ptr<DocumentEncoder> verify_encoder;
  double verify_fraction = 0.001;  // in [0, 1]
  // Which encoder a Hugging Face tokenizer directory (the commands' --hf-tokenizer, Python's
  // hf_tokenizer) runs with: "native" (the built-in hf-bpe: tokenizer; refused, the feature
  // named, for a file it cannot reproduce exactly), "tokenizers" (the package, as `encoder`)
  // or "auto" (native when it supports the file). Those doors settle it into `tokenizer` or
  // `encoder` before the run; it is here so that they share one default. Checked, not read,
  // by the run.
  std::string tokenizer_impl = "auto";
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
  // What tells a resumed run that its inputs are the interrupted run's: their path, size and
  // modification time (stat), or also their bytes' SHA-256 (content: every input read once
  // more at the start, for inputs rewritten in place without a change of size or time).
  // One of the options a resume must share with the run it takes over.
  ResumeCheck resume_check = ResumeCheck::stat;

  std::function<void(const PrepareTextProgress&)> on_progress;  // from one thread at a time
  double progress_interval_seconds = 0.5;
  // When it becomes true, the run stops within a chunk and throws PrepareInterrupted; the
  // staging directory is kept, for a run with `resume` to go on from its last finished shard.
  const std::atomic<bool>* stop_requested = nullptr;
  // One task of several (PrepareTextTask): output_dir/parts/INDEX/ is written, not output_dir.
  std::optional<PrepareTextTask> task;
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
  std::uint64_t shards_reused = 0;       // finished shards kept from a resumed run
  std::uint64_t verified_documents = 0;  // encoded again by verify_encoder, the same ids (this run's)
  bool resumed = false;
  double seconds = 0;
  std::vector<std::filesystem::path> removed_stale_dirs;
  std::filesystem::path written;  // the directory made: output_dir, or a task's output_dir/parts/INDEX
};

// Runs it. Throws Error(config) for bad options (naming the option), Error(io) for files that
// cannot be read or written, Error(format) for the first bad line under OnBadLine::fail
// ("FILE:LINE: REASON: DETAIL") or when no document lands in train, PrepareInterrupted when
// stopped. Nothing is left at output_dir on failure.
TOKENFEED_API PrepareTextSummary prepare_text_corpus(const PrepareTextOptions& options);

// prepare-text --merge: once every task of output_dir has finished, makes the dataset there:
// each part's shards, in task order, hard-linked (never copied) into train/ and val/ under
// new numbers, dataset_metadata.json with the parts' counts summed and every shard's
// SHA-256, all staged beside output_dir and swapped in at once; the parts are removed then.
// The dataset holds the documents of a one-process run, in its order, split alike (only the
// shard boundaries may differ). Throws Error(config) naming every task that is missing or
// unfinished, or a part that is not of this preparation; Error(format) when no document
// landed in train; Error(io) when a file cannot be linked or written. The summary's skipped
// lines carry counts only.
TOKENFEED_API PrepareTextSummary merge_text_parts(const std::filesystem::path& output_dir);

}  // namespace tokenfeed
