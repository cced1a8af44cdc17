#include "prepare/prepare.hpp"

#include <tbb/parallel_pipeline.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "dataset/content_checksum.hpp"
#include "dataset/dataset_metadata.hpp"
#include "io/line_reader.hpp"
#include "util/sha256.hpp"
#include "util/filesystem_errors.hpp"
#include "io/staging_dir.hpp"
#include "prepare/output_dir.hpp"
#include "prepare/stage_fence.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/version.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kReasonTokenizerError = "tokenizer_error";  // the tokenizer rejected the text
constexpr std::size_t kMaxLinesPerChunk = 4096;

// Every reason a line can be skipped for, in the order they are reported.
std::vector<std::string> all_reasons() {
  std::vector<std::string> reasons = {std::string(kReasonInvalidJson), std::string(kReasonWrongType),
                                      std::string(kReasonMissingField), std::string(kReasonLineTooLong)};
  for (const ChatProblem p : {ChatProblem::empty_conversation, ChatProblem::unknown_role, ChatProblem::misplaced_system,
                              ChatProblem::no_assistant_turn, ChatProblem::no_tool_token,
                              ChatProblem::special_token_in_content, ChatProblem::id_out_of_range}) {
    reasons.emplace_back(to_string(p));
  }
  reasons.emplace_back(kReasonTokenizerError);
  return reasons;
}

struct LineOutcome {
  enum class Kind : std::uint8_t { episode, blank, bad } kind = Kind::blank;
  std::string reason, detail;  // bad
  std::vector<std::uint32_t> ids;
  std::vector<std::uint8_t> mask;
  bool val = false;
};

// A chunk of consecutive input lines: the pipeline's unit of work, read together, formatted
// by one worker and written in input order.
struct LineChunk {
  std::uint64_t first_line = 0;  // 1-based number of lines[0]
  std::vector<std::string> lines;
  std::vector<std::uint8_t> too_long;
  std::vector<LineOutcome> outcomes;
  std::uint64_t raw_bytes_after = 0;
};

// The line chunks in flight. Stages pass plain pointers (TBB keeps them in its own buffers);
// the pool owns every chunk, so a cancelled pipeline leaks nothing, and reuses them, so
// memory stays at the number of chunks in flight. Thread-safety: acquire/release may be
// called from any thread.
class LineChunkPool {
 public:
  LineChunk* acquire() {
    const MutexLock lock(mutex_);
    if (free_.empty()) {
      all_.push_back(std::make_unique<LineChunk>());
      return all_.back().get();
    }
    LineChunk* chunk = free_.back();
    free_.pop_back();
    return chunk;
  }
  void release(LineChunk* chunk) {
    chunk->lines.clear();
    chunk->too_long.clear();
    chunk->outcomes.clear();
    const MutexLock lock(mutex_);
    free_.push_back(chunk);
  }

 private:
  Mutex mutex_;
  std::vector<std::unique_ptr<LineChunk>> all_ TF_GUARDED_BY(mutex_);
  std::vector<LineChunk*> free_ TF_GUARDED_BY(mutex_);
};

// How lines become ids: a tokenizer for text input, or the special-token file for ids input.
struct Formatter {
  ConversationInput input = ConversationInput::text;
  const Tokenizer* tokenizer = nullptr;
  std::string system_text;
  PretokenizedSpecials pretokenized;
  SpecialTokenIds special;
  std::uint64_t seed = 0;
  double val_split = 0;
  std::size_t max_line_bytes = 0;

  void process(const std::string& line, bool too_long, LineOutcome& out) const {
    if (too_long) {
      out.kind = LineOutcome::Kind::bad;
      out.reason = kReasonLineTooLong;
      out.detail = "the line is longer than " + std::to_string(max_line_bytes) + " bytes";
      return;
    }
    if (std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; })) {
      out.kind = LineOutcome::Kind::blank;
      return;
    }
    ParsedConversation conversation;
    if (auto defect = parse_conversation_line(line, input, conversation)) {
      out.kind = LineOutcome::Kind::bad;
      out.reason = std::move(defect->reason);
      out.detail = std::move(defect->detail);
      return;
    }
    std::optional<ChatDefect> defect;
    try {
      if (input == ConversationInput::text) {
        defect = append_chat_ids(conversation.text, *tokenizer, system_text, out.ids);
      } else {
        defect = append_tokenized_chat_ids(conversation.tokenized, special, pretokenized.default_system_ids,
                                           pretokenized.vocab_size, out.ids);
      }
    } catch (const Error& e) {
      out.kind = LineOutcome::Kind::bad;
      out.reason = kReasonTokenizerError;
      out.detail = e.what();
      out.ids = {};
      return;
    }
    if (defect) {
      out.kind = LineOutcome::Kind::bad;
      out.reason = to_string(defect->problem);
      out.detail = std::move(defect->detail);
      out.ids = {};
      return;
    }
    out.kind = LineOutcome::Kind::episode;
    out.mask = input == ConversationInput::text ? chat_loss_mask(conversation.text, out.ids, special)
                                                : chat_loss_mask(conversation.tokenized, out.ids, special);
    out.val = split_is_val(conversation, seed, val_split);
  }
};

void put_u64_le(Sha256& sha, std::uint64_t v) {
  std::uint8_t bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::uint8_t>(v >> (8 * i));
  sha.update(bytes, sizeof bytes);
}

void write_json_file(const fs::path& path, const ordered_json& doc) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(ErrorKind::io, "cannot create '" + path.string() + "'");
  out << doc.dump(2) << '\n';
  out.close();
  if (!out) throw Error(ErrorKind::io, "error while writing '" + path.string() + "'");
}

ordered_json split_json(const EpisodeDatasetWriterSummary& s) {
  ordered_json j;
  j["episodes"] = s.episodes;
  j["tokens"] = s.tokens;
  j["masked_tokens"] = s.masked_tokens;
  j["shards"] = s.shards;
  return j;
}

// Throws PrepareInterrupted when the caller asked the run to stop.
void check_stop(const PrepareOptions& options) {
  if (options.stop_requested != nullptr && options.stop_requested->load(std::memory_order_relaxed)) {
    throw PrepareInterrupted();
  }
}

// Options that make no sense whatever the input: refused before anything is read or created.
void check_options(const PrepareOptions& options) {
  if (!(options.val_split >= 0.0 && options.val_split < 1.0)) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", options.val_split);
    throw Error(ErrorKind::config,
                std::string("val split must be in [0, 1) (train needs conversations), got ") + value);
  }
  if (options.special_tokens_file && options.system_text) {
    throw Error(ErrorKind::config,
                "a system text applies to text input only; pre-tokenized input (a special-tokens file) takes "
                "\"default_system_ids\" from that file");
  }
  if (options.max_line_bytes == 0 || options.batch_bytes == 0) {
    throw Error(ErrorKind::config, "max line bytes and batch bytes must be positive");
  }
}

// How lines become ids (a tokenizer for text input, or the special-token file for ids
// input), and what tokenizer_state.json records of it.
struct TokenizerSetup {
  Formatter formatter;
  std::unique_ptr<Tokenizer> tokenizer;  // text input; formatter.tokenizer points to it
  std::uint32_t vocab_size = 0;
  ordered_json state;
};

TokenizerSetup set_up_tokenizer(const PrepareOptions& options) {
  TokenizerSetup setup;
  Formatter& formatter = setup.formatter;
  ordered_json& tokenizer_state = setup.state;
  if (options.special_tokens_file) {
    formatter.input = ConversationInput::token_ids;
    formatter.pretokenized = read_pretokenized_specials(*options.special_tokens_file);
    formatter.special = formatter.pretokenized.ids;
    setup.vocab_size = formatter.pretokenized.vocab_size;
    tokenizer_state["kind"] = "pretokenized";
    tokenizer_state["special_tokens_file"] = {{"path", recorded_path(*options.special_tokens_file)},
                                              {"sha256", sha256_file_hex(*options.special_tokens_file)}};
    tokenizer_state["vocab_size"] = setup.vocab_size;
    ordered_json specials = special_tokens_json(formatter.special);
    tokenizer_state["special_tokens"] = specials;
    tokenizer_state["default_system_ids"] = formatter.pretokenized.default_system_ids;
  } else {
    setup.tokenizer = make_tokenizer(options.tokenizer, options.special_strings);
    formatter.input = ConversationInput::text;
    formatter.tokenizer = setup.tokenizer.get();
    formatter.special = setup.tokenizer->special_ids();
    check_special_token_ids(formatter.special, "tokenizer '" + options.tokenizer + "'");
    setup.vocab_size = setup.tokenizer->vocab_size();
    const TokenizerDescription d = setup.tokenizer->describe();
    tokenizer_state["kind"] = d.kind;
    if (d.model_path.empty()) {
      tokenizer_state["model"] = nullptr;
    } else {
      tokenizer_state["model"] = {{"path", recorded_path(d.model_path)}, {"sha256", d.model_sha256}};
    }
    tokenizer_state["spec"] = options.tokenizer;
    tokenizer_state["base_vocab_size"] = d.base_vocab_size;
    tokenizer_state["vocab_size"] = d.vocab_size;
    ordered_json specials = ordered_json::object();
    for (const SpecialTokenInfo& s : d.special_tokens) {
      specials[s.role] = {{"id", s.id}, {"text", s.text}, {"source", to_string(s.source)}};
    }
    tokenizer_state["special_tokens"] = specials;
    tokenizer_state["default_system_text"] = options.system_text.value_or(std::string(kDefaultSystemText));
  }
  formatter.system_text = options.system_text.value_or(std::string(kDefaultSystemText));
  formatter.seed = options.seed;
  formatter.val_split = options.val_split;
  formatter.max_line_bytes = options.max_line_bytes;
  return setup;
}

// Progress reports to options.on_progress: at most every progress_interval_seconds while
// the lines are written, and once at the end. Called from one thread at a time.
class ProgressReport {
 public:
  ProgressReport(const PrepareOptions& options, const LineReader& reader, Clock::time_point started)
      : options_(options), reader_(reader), started_(started), last_(started) {}

  void report(std::uint64_t raw_bytes, std::uint64_t lines, bool done) const {
    if (!options_.on_progress) return;
    PrepareProgress p;
    p.done = done;
    p.input_bytes_read = raw_bytes;
    p.input_bytes_total = reader_.file_size();
    p.lines = lines;
    p.tokens = tokens_written;
    p.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    options_.on_progress(p);
  }
  // A report when the interval has passed since the last one.
  void tick(std::uint64_t raw_bytes, std::uint64_t lines) {
    const Clock::time_point now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() >= options_.progress_interval_seconds) {
      last_ = now;
      report(raw_bytes, lines, false);
    }
  }

  std::uint64_t tokens_written = 0;

 private:
  const PrepareOptions& options_;
  const LineReader& reader_;
  Clock::time_point started_, last_;
};

// Where the formatted lines go: the two split writers and the summary's counts.
struct EpisodeSink {
  EpisodeDatasetWriter& train;
  EpisodeDatasetWriter& val;
  PrepareSummary& summary;
  ProgressReport& progress;
};

// Stage 1's body: the next lines of `reader`, up to batch_bytes (or kMaxLinesPerChunk) of
// them, in a chunk from `pool`; nullptr (the chunk returned) when the input is exhausted.
// Sets `input_done` when the reader reached its end.
LineChunk* read_line_chunk(const PrepareOptions& options, LineReader& reader, LineChunkPool& pool, bool& input_done) {
  LineChunk* chunk = pool.acquire();
  chunk->first_line = reader.line_number() + 1;
  std::size_t bytes = 0;
  std::string line;
  bool too_long = false;
  while (chunk->lines.size() < kMaxLinesPerChunk && bytes < options.batch_bytes) {
    check_stop(options);  // a slow input (a pipe) may take long to fill a chunk
    if (!reader.next(line, too_long)) {
      input_done = true;
      break;
    }
    bytes += line.size() + 1;
    chunk->lines.push_back(std::move(line));
    chunk->too_long.push_back(too_long ? 1 : 0);
    line = std::string();
  }
  chunk->raw_bytes_after = reader.raw_bytes_read();
  if (chunk->lines.empty()) {
    pool.release(chunk);
    return nullptr;
  }
  return chunk;
}

// Stage 3's body for one line: its episode written, or counted as blank or skipped (the
// first of each reason kept for the summary); under OnBadLine::fail a bad line throws
// Error(format) naming the input's line.
void write_line_outcome(const PrepareOptions& options, std::uint64_t line_no, const LineOutcome& o,
                        const EpisodeSink& sink) {
  PrepareSummary& summary = sink.summary;
  ++summary.lines;
  switch (o.kind) {
    case LineOutcome::Kind::blank:
      ++summary.blank_lines;
      break;
    case LineOutcome::Kind::bad: {
      if (options.on_error == OnBadLine::fail) {
        throw Error(ErrorKind::format,
                    options.input.string() + ":" + std::to_string(line_no) + ": " + o.reason + ": " + o.detail);
      }
      SkippedLines& skipped = summary.skipped[o.reason];
      if (skipped.count++ == 0) {
        skipped.first_line = line_no;
        skipped.first_detail = o.detail;
      }
      ++summary.skipped_total;
      break;
    }
    case LineOutcome::Kind::episode:
      (o.val ? sink.val : sink.train).add(o.ids, o.mask);
      sink.progress.tokens_written += o.ids.size();
      ++summary.conversations;
      break;
  }
}

// Reads every line of `reader`, formats the lines in parallel and writes the episodes in
// input order into `sink` (a three-stage TBB pipeline over chunks of lines, at most a few
// chunks per worker in flight). Throws Error(format) for the first bad line under
// OnBadLine::fail, PrepareInterrupted when stopped.
void write_episodes(const PrepareOptions& options, const Formatter& formatter, LineReader& reader,
                    const EpisodeSink& sink) {
  // Stage 1 (serial, in order): read up to batch_bytes of lines.
  bool input_done = false;
  LineChunkPool pool;
  const auto read_chunk = [&](tbb::flow_control& fc) -> LineChunk* {
    const StageFence fence;
    check_stop(options);  // thrown from a stage, it cancels the pipeline
    LineChunk* chunk = read_line_chunk(options, reader, pool, input_done);
    if (chunk == nullptr) fc.stop();
    return chunk;
  };
  // Stage 2 (parallel): parse, check, tokenize, mask, assign the split.
  const auto format_chunk = [&](LineChunk* chunk) {
    const StageFence fence;
    chunk->outcomes.resize(chunk->lines.size());
    for (std::size_t i = 0; i < chunk->lines.size(); ++i) {
      formatter.process(chunk->lines[i], chunk->too_long[i] != 0, chunk->outcomes[i]);
      chunk->lines[i] = std::string();
    }
    return chunk;
  };
  // Stage 3 (serial, in input order): write episodes, count or fail on bad lines.
  const auto write_chunk = [&](LineChunk* chunk) {
    const StageFence fence;
    check_stop(options);
    for (std::size_t i = 0; i < chunk->outcomes.size(); ++i) {
      write_line_outcome(options, chunk->first_line + i, chunk->outcomes[i], sink);
      chunk->outcomes[i] = LineOutcome();
    }
    sink.progress.tick(chunk->raw_bytes_after, sink.summary.lines);
    pool.release(chunk);
  };

  // Chunks in flight bound the memory: a few per worker thread, whatever the input size.
  tbb::task_arena arena(options.threads > 0 ? options.threads : tbb::task_arena::automatic);
  const auto live_chunks = static_cast<std::size_t>(std::clamp(2 * arena.max_concurrency() + 2, 4, 64));
  publish_to_stages();  // the setup above
  try {
    arena.execute([&] {
      tbb::parallel_pipeline(live_chunks,
                             tbb::make_filter<void, LineChunk*>(tbb::filter_mode::serial_in_order, read_chunk) &
                                 tbb::make_filter<LineChunk*, LineChunk*>(tbb::filter_mode::parallel, format_chunk) &
                                 tbb::make_filter<LineChunk*, void>(tbb::filter_mode::serial_in_order, write_chunk));
    });
  } catch (...) {
    acquire_from_stages();  // before unwinding destroys the stages' work
    throw;
  }
  acquire_from_stages();
  if (!input_done) throw Error(ErrorKind::pipeline, "prepare: the input was not read to its end");
}

// The loader refuses a dataset without train episodes: fail instead of writing one.
void check_train_has_episodes(const PrepareOptions& options, const PrepareSummary& summary) {
  if (summary.train.episodes != 0) return;
  const std::string input_name = options.input.string();
  const std::string lines = std::to_string(summary.lines) + " line" + (summary.lines == 1 ? "" : "s");
  if (summary.conversations == 0) {
    throw Error(ErrorKind::format,
                input_name + ": no conversation to write (" + lines + ": " + std::to_string(summary.skipped_total) +
                    " skipped, " + std::to_string(summary.blank_lines) + " blank); the train split needs at least one");
  }
  char fraction[32];
  std::snprintf(fraction, sizeof fraction, "%g", options.val_split);
  const std::string which = summary.conversations == 1
                                ? std::string("the only conversation")
                                : "all " + std::to_string(summary.conversations) + " conversations";
  throw Error(ErrorKind::format, input_name + ": " + which + " landed in val (val split " + fraction +
                                     "); the train split needs at least one: lower the val split or add "
                                     "conversations");
}

// The SHA-256 of every shard's files under `root` (train/..., val/...), by shard in order.
ordered_json content_checksums(const fs::path& root) {
  std::error_code ec;
  ordered_json checksums = ordered_json::object();
  for (const char* split : {"train", "val"}) {
    const fs::path split_dir = root / split;
    if (!fs::is_directory(split_dir, ec)) continue;
    std::vector<fs::path> shards;
    for (const auto& entry : fs::directory_iterator(split_dir)) shards.push_back(entry.path());
    std::sort(shards.begin(), shards.end());
    for (const fs::path& shard : shards) {
      ordered_json files = ordered_json::object();
      for (const auto& [file, hex] : checksum_shard(shard)) files[file] = hex;
      checksums[std::string(split) + "/" + shard.filename().string()] = files;
    }
  }
  return checksums;
}

// dataset_metadata.json of the prepared dataset under `root`: the loader's fields, then the
// record of how it was made.
ordered_json metadata_document(const PrepareOptions& options, const PrepareSummary& summary, ConversationInput input,
                               bool gzip, const fs::path& root) {
  DatasetMetadata fields;
  fields.token_dtype = summary.token_dtype;
  fields.mask_dtype = MaskDtype::uint8;
  fields.vocab_size = summary.vocab_size;
  fields.eot_token_id = summary.special.eot;
  fields.pad_token_id = summary.special.eot;
  ordered_json meta = dataset_metadata_fields(fields, special_tokens_json(summary.special));
  meta["splits"] = {{"train", split_json(summary.train)}, {"val", split_json(summary.val)}};
  meta["source"] = {{"file", options.input.filename().string()},
                    {"sha256", summary.input_sha256},
                    {"bytes", summary.input_bytes},
                    {"gzip", gzip},
                    {"lines", summary.lines},
                    {"blank_lines", summary.blank_lines}};
  meta["chat_template"] = {{"turn", "ROLE_TOKEN content EOT"},
                           {"system_turn", "always first; injected when absent"},
                           {"loss_mask", "assistant content and assistant EOT"}};
  meta["split"] = {{"rule", "tokenfeed-split-v1 (sha256 of seed and messages)"},
                   {"seed", options.seed},
                   {"val_split", options.val_split}};
  meta["tokenizer"] = input == ConversationInput::text ? options.tokenizer : std::string("pretokenized");
  meta["on_error"] = options.on_error == OnBadLine::fail ? "fail" : "skip";
  ordered_json skipped = ordered_json::object();
  for (const std::string& reason : all_reasons()) {
    const auto it = summary.skipped.find(reason);
    skipped[reason] = it == summary.skipped.end() ? 0 : it->second.count;
  }
  meta["skipped"] = skipped;
  meta["content_sha256"] = content_checksums(root);
  meta["created_by"] = "tokenfeed prepare";
  meta["tokenfeed_version"] = version();
  return meta;
}

}  // namespace

double split_point(const ParsedConversation& conversation, std::uint64_t seed) {
  Sha256 sha;
  static constexpr char kDomain[] = "tokenfeed-split-v1";
  sha.update(kDomain, sizeof kDomain);  // includes the terminating 0 byte
  put_u64_le(sha, seed);
  const std::uint8_t zero = 0;
  for (const ChatMessage& m : conversation.text) {
    sha.update(m.role);
    sha.update(&zero, 1);
    put_u64_le(sha, m.content.size());
    sha.update(m.content);
  }
  for (const TokenizedChatMessage& m : conversation.tokenized) {
    sha.update(m.role);
    sha.update(&zero, 1);
    put_u64_le(sha, m.ids.size());
    for (const std::uint32_t id : m.ids) {
      const std::uint8_t bytes[4] = {static_cast<std::uint8_t>(id), static_cast<std::uint8_t>(id >> 8),
                                     static_cast<std::uint8_t>(id >> 16), static_cast<std::uint8_t>(id >> 24)};
      sha.update(bytes, 4);
    }
  }
  const Sha256::Digest digest = sha.finish();
  std::uint64_t top = 0;
  for (int i = 0; i < 8; ++i) top = (top << 8) | digest[static_cast<std::size_t>(i)];
  return static_cast<double>(top >> 11) * 0x1.0p-53;
}

namespace {

// prepare_chat_dataset itself; its caller turns a filesystem error under it into tokenfeed's.
PrepareSummary prepare_chat_dataset_directly(const PrepareOptions& options) {
  const Clock::time_point started = Clock::now();
  check_options(options);
  const TokenizerSetup tokenizer = set_up_tokenizer(options);
  const TokenDtype dtype = choose_token_dtype(options.token_dtype, tokenizer.vocab_size);

  // Output goes to a temporary sibling directory, renamed at the end; the ones earlier runs
  // left behind when they were killed go first.
  const fs::path out_dir = normalized_output(options.output_dir);
  check_output_dir(out_dir);
  std::error_code ec;
  fs::create_directories(out_dir.parent_path(), ec);
  if (ec) throw Error(ErrorKind::io, "cannot create '" + out_dir.parent_path().string() + "': " + ec.message());
  PrepareSummary summary;
  summary.removed_stale_dirs = remove_stale_staging_dirs(out_dir);
  check_stop(options);
  StagingDir staging(out_dir);

  LineReader reader(options.input, options.max_line_bytes);
  // The checksums go into the metadata written below, with the rest of it.
  const EpisodeDatasetWriterOptions writer_options{dtype, true, options.shard_tokens, false, false};
  EpisodeDatasetWriter train(staging.path() / "train", writer_options);
  EpisodeDatasetWriter val(staging.path() / "val", writer_options);
  summary.token_dtype = dtype;
  summary.vocab_size = tokenizer.vocab_size;
  summary.special = tokenizer.formatter.special;

  ProgressReport progress(options, reader, started);
  write_episodes(options, tokenizer.formatter, reader, EpisodeSink{train, val, summary, progress});
  summary.train = train.finish();
  summary.val = val.finish();
  check_train_has_episodes(options, summary);
  // An empty val split is left out (the loader treats val/ as optional and refuses an empty
  // split); the metadata records it with zero episodes.
  if (summary.val.episodes == 0) {
    fs::remove_all(staging.path() / "val", ec);
    if (ec) {
      throw Error(ErrorKind::io,
                  "cannot remove an empty split under '" + staging.path().string() + "': " + ec.message());
    }
    summary.val.shards = 0;
  }
  summary.input_bytes = reader.raw_bytes_read();
  summary.input_sha256 = reader.sha256_hex();
  progress.report(summary.input_bytes, summary.lines, true);

  write_metadata_document(
      staging.path(), metadata_document(options, summary, tokenizer.formatter.input, reader.is_gzip(), staging.path()));
  write_json_file(staging.path() / "tokenizer_state.json", tokenizer.state);

  check_output_dir(out_dir);
  check_stop(options);  // the last moment a stop request can still take effect
  staging.commit();
  summary.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return summary;
}

}  // namespace

PrepareSummary prepare_chat_dataset(const PrepareOptions& options) {
  return filesystem_errors_as_io([&] { return prepare_chat_dataset_directly(options); });
}

}  // namespace tokenfeed
