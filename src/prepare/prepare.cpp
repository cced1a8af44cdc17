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
#include <mutex>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "dataset/content_checksum.hpp"
#include "dataset/dataset_metadata.hpp"
#include "io/line_reader.hpp"
#include "util/sha256.hpp"
#include "io/staging_dir.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/version.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

constexpr std::string_view kReasonTokenizerError = "tokenizer_error";  // the tokenizer rejected the text
constexpr std::size_t kMaxLinesPerBatch = 4096;

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

struct Batch {
  std::uint64_t first_line = 0;  // 1-based number of lines[0]
  std::vector<std::string> lines;
  std::vector<std::uint8_t> too_long;
  std::vector<LineOutcome> outcomes;
  std::uint64_t raw_bytes_after = 0;
};

// The batches in flight. Stages pass plain pointers (TBB keeps them in its own buffers); the
// pool owns every batch, so a cancelled pipeline leaks nothing, and reuses them, so memory
// stays at the number of batches in flight. Thread-safety: acquire/release may be called
// from any thread.
class BatchPool {
 public:
  Batch* acquire() {
    const std::lock_guard lock(mutex_);
    if (free_.empty()) {
      all_.push_back(std::make_unique<Batch>());
      return all_.back().get();
    }
    Batch* batch = free_.back();
    free_.pop_back();
    return batch;
  }
  void release(Batch* batch) {
    batch->lines.clear();
    batch->too_long.clear();
    batch->outcomes.clear();
    const std::lock_guard lock(mutex_);
    free_.push_back(batch);
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Batch>> all_;
  std::vector<Batch*> free_;
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

// Makes the pipeline's hand-offs visible to ThreadSanitizer. libtbb is not instrumented, so
// TSan cannot see the ordering its scheduler guarantees (one stage of a batch before the next,
// the invocations of a serial stage one after another, every stage before parallel_pipeline
// returns). Each stage body holds a StageFence: an acquire-release RMW on one shared atomic
// at entry and at exit (also when it throws), which orders every body after the ones that
// finished before it started. The cost is two RMWs per batch of lines. The atomic is a
// constant-initialized global, not a local: TSan would see a local's initialization as a plain
// write that the workers' first RMW races with. Concurrent runs sharing it only order more.
constinit std::atomic<std::uint64_t> g_stage_sync{0};

class StageFence {
 public:
  StageFence() noexcept { g_stage_sync.fetch_add(1, std::memory_order_acq_rel); }
  ~StageFence() { g_stage_sync.fetch_add(1, std::memory_order_acq_rel); }
  StageFence(const StageFence&) = delete;
  StageFence& operator=(const StageFence&) = delete;
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

// The output path without a trailing separator, made absolute.
fs::path normalized_output(const fs::path& p) {
  fs::path out = fs::absolute(p).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();
  return out;
}

// An existing file's canonical path (absolute, links resolved) for the records, so that they
// name the file whatever the working directory was; the absolute path if that fails.
std::string recorded_path(const fs::path& p) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(p, ec);
  return ec ? fs::absolute(p).lexically_normal().string() : canonical.string();
}

// Throws PrepareInterrupted when the caller asked the run to stop.
void check_stop(const PrepareOptions& options) {
  if (options.stop_requested != nullptr && options.stop_requested->load(std::memory_order_relaxed)) {
    throw PrepareInterrupted();
  }
}

void check_output_dir(const fs::path& out) {
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st)) {
    throw Error(ErrorKind::config, "output '" + out.string() + "' exists and is not a directory");
  }
  if (!fs::is_empty(out, ec) || ec) {
    throw Error(ErrorKind::config,
                "output directory '" + out.string() + "' already exists and is not empty; remove it or choose another");
  }
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

PrepareSummary prepare_chat_dataset(const PrepareOptions& options) {
  const Clock::time_point started = Clock::now();
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

  // The formatter: tokenizer or pre-tokenized specials.
  Formatter formatter;
  std::unique_ptr<Tokenizer> tokenizer;
  std::uint32_t vocab_size = 0;
  ordered_json tokenizer_state;
  if (options.special_tokens_file) {
    formatter.input = ConversationInput::token_ids;
    formatter.pretokenized = read_pretokenized_specials(*options.special_tokens_file);
    formatter.special = formatter.pretokenized.ids;
    vocab_size = formatter.pretokenized.vocab_size;
    tokenizer_state["kind"] = "pretokenized";
    tokenizer_state["special_tokens_file"] = {{"path", recorded_path(*options.special_tokens_file)},
                                              {"sha256", sha256_file_hex(*options.special_tokens_file)}};
    tokenizer_state["vocab_size"] = vocab_size;
    ordered_json specials = special_tokens_json(formatter.special);
    tokenizer_state["special_tokens"] = specials;
    tokenizer_state["default_system_ids"] = formatter.pretokenized.default_system_ids;
  } else {
    tokenizer = make_tokenizer(options.tokenizer, options.special_strings);
    formatter.input = ConversationInput::text;
    formatter.tokenizer = tokenizer.get();
    formatter.special = tokenizer->special_ids();
    check_special_token_ids(formatter.special, "tokenizer '" + options.tokenizer + "'");
    vocab_size = tokenizer->vocab_size();
    const TokenizerDescription d = tokenizer->describe();
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

  TokenDtype dtype = vocab_size <= 65536 ? TokenDtype::uint16 : TokenDtype::uint32;
  if (options.token_dtype) {
    if (*options.token_dtype == TokenDtype::uint16 && vocab_size > 65536) {
      throw Error(ErrorKind::config, "token dtype uint16 cannot hold a vocabulary of " + std::to_string(vocab_size) +
                                         " ids; use uint32 or auto");
    }
    dtype = *options.token_dtype;
  }

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
  summary.vocab_size = vocab_size;
  summary.special = formatter.special;
  const std::string input_name = options.input.string();
  Clock::time_point last_progress = started;
  std::uint64_t tokens_written = 0;
  const auto report = [&](std::uint64_t raw_bytes, bool done) {
    if (!options.on_progress) return;
    PrepareProgress p;
    p.done = done;
    p.input_bytes_read = raw_bytes;
    p.input_bytes_total = reader.file_size();
    p.lines = summary.lines;
    p.tokens = tokens_written;
    p.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    options.on_progress(p);
  };

  // Stage 1 (serial, in order): read up to batch_bytes of lines.
  bool input_done = false;
  BatchPool pool;
  const auto read_batch = [&](tbb::flow_control& fc) -> Batch* {
    const StageFence fence;
    check_stop(options);  // thrown from a stage, it cancels the pipeline
    Batch* batch = pool.acquire();
    batch->first_line = reader.line_number() + 1;
    std::size_t bytes = 0;
    std::string line;
    bool too_long = false;
    while (batch->lines.size() < kMaxLinesPerBatch && bytes < options.batch_bytes) {
      check_stop(options);  // a slow input (a pipe) may take long to fill a batch
      if (!reader.next(line, too_long)) {
        input_done = true;
        break;
      }
      bytes += line.size() + 1;
      batch->lines.push_back(std::move(line));
      batch->too_long.push_back(too_long ? 1 : 0);
      line = std::string();
    }
    batch->raw_bytes_after = reader.raw_bytes_read();
    if (batch->lines.empty()) {
      pool.release(batch);
      fc.stop();
      return nullptr;
    }
    return batch;
  };
  // Stage 2 (parallel): parse, check, tokenize, mask, assign the split.
  const auto format_batch = [&](Batch* batch) {
    const StageFence fence;
    batch->outcomes.resize(batch->lines.size());
    for (std::size_t i = 0; i < batch->lines.size(); ++i) {
      formatter.process(batch->lines[i], batch->too_long[i] != 0, batch->outcomes[i]);
      batch->lines[i] = std::string();
    }
    return batch;
  };
  // Stage 3 (serial, in input order): write episodes, count or fail on bad lines.
  const auto write_batch = [&](Batch* batch) {
    const StageFence fence;
    check_stop(options);
    for (std::size_t i = 0; i < batch->outcomes.size(); ++i) {
      LineOutcome& o = batch->outcomes[i];
      const std::uint64_t line_no = batch->first_line + i;
      ++summary.lines;
      switch (o.kind) {
        case LineOutcome::Kind::blank:
          ++summary.blank_lines;
          break;
        case LineOutcome::Kind::bad: {
          if (options.on_error == OnBadLine::fail) {
            throw Error(ErrorKind::format,
                        input_name + ":" + std::to_string(line_no) + ": " + o.reason + ": " + o.detail);
          }
          SkippedLines& s = summary.skipped[o.reason];
          if (s.count++ == 0) {
            s.first_line = line_no;
            s.first_detail = o.detail;
          }
          ++summary.skipped_total;
          break;
        }
        case LineOutcome::Kind::episode:
          (o.val ? val : train).add(o.ids, o.mask);
          tokens_written += o.ids.size();
          ++summary.conversations;
          break;
      }
      o = LineOutcome();
    }
    const Clock::time_point now = Clock::now();
    if (std::chrono::duration<double>(now - last_progress).count() >= options.progress_interval_seconds) {
      last_progress = now;
      report(batch->raw_bytes_after, false);
    }
    pool.release(batch);
  };

  // Batches in flight bound the memory: a few per worker thread, whatever the input size.
  tbb::task_arena arena(options.threads > 0 ? options.threads : tbb::task_arena::automatic);
  const auto live_batches = static_cast<std::size_t>(std::clamp(2 * arena.max_concurrency() + 2, 4, 64));
  g_stage_sync.fetch_add(1, std::memory_order_release);  // the setup above, for the stages
  try {
    arena.execute([&] {
      tbb::parallel_pipeline(live_batches,
                             tbb::make_filter<void, Batch*>(tbb::filter_mode::serial_in_order, read_batch) &
                                 tbb::make_filter<Batch*, Batch*>(tbb::filter_mode::parallel, format_batch) &
                                 tbb::make_filter<Batch*, void>(tbb::filter_mode::serial_in_order, write_batch));
    });
  } catch (...) {
    g_stage_sync.load(std::memory_order_acquire);  // the stages' work, before unwinding destroys it
    throw;
  }
  g_stage_sync.load(std::memory_order_acquire);
  if (!input_done) throw Error(ErrorKind::pipeline, "prepare: the input was not read to its end");

  summary.train = train.finish();
  summary.val = val.finish();
  // The loader refuses a dataset without train episodes: fail instead of writing one.
  if (summary.train.episodes == 0) {
    const std::string lines = std::to_string(summary.lines) + " line" + (summary.lines == 1 ? "" : "s");
    if (summary.conversations == 0) {
      throw Error(ErrorKind::format, input_name + ": no conversation to write (" + lines + ": " +
                                         std::to_string(summary.skipped_total) + " skipped, " +
                                         std::to_string(summary.blank_lines) +
                                         " blank); the train split needs at least one");
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
  report(summary.input_bytes, true);

  DatasetMetadata fields;
  fields.token_dtype = dtype;
  fields.mask_dtype = MaskDtype::uint8;
  fields.vocab_size = vocab_size;
  fields.eot_token_id = summary.special.eot;
  fields.pad_token_id = summary.special.eot;
  ordered_json meta = dataset_metadata_fields(fields, special_tokens_json(summary.special));
  meta["splits"] = {{"train", split_json(summary.train)}, {"val", split_json(summary.val)}};
  meta["source"] = {{"file", options.input.filename().string()},
                    {"sha256", summary.input_sha256},
                    {"bytes", summary.input_bytes},
                    {"gzip", reader.is_gzip()},
                    {"lines", summary.lines},
                    {"blank_lines", summary.blank_lines}};
  meta["chat_template"] = {{"turn", "ROLE_TOKEN content EOT"},
                           {"system_turn", "always first; injected when absent"},
                           {"loss_mask", "assistant content and assistant EOT"}};
  meta["split"] = {{"rule", "tokenfeed-split-v1 (sha256 of seed and messages)"},
                   {"seed", options.seed},
                   {"val_split", options.val_split}};
  meta["tokenizer"] = formatter.input == ConversationInput::text ? options.tokenizer : std::string("pretokenized");
  meta["on_error"] = options.on_error == OnBadLine::fail ? "fail" : "skip";
  ordered_json skipped = ordered_json::object();
  for (const std::string& reason : all_reasons()) {
    const auto it = summary.skipped.find(reason);
    skipped[reason] = it == summary.skipped.end() ? 0 : it->second.count;
  }
  meta["skipped"] = skipped;
  ordered_json checksums = ordered_json::object();
  for (const char* split : {"train", "val"}) {
    const fs::path split_dir = staging.path() / split;
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
  meta["content_sha256"] = checksums;
  meta["created_by"] = "tokenfeed prepare";
  meta["tokenfeed_version"] = version();
  write_metadata_document(staging.path(), std::move(meta));
  write_json_file(staging.path() / "tokenizer_state.json", tokenizer_state);

  check_output_dir(out_dir);
  check_stop(options);  // the last moment a stop request can still take effect
  staging.commit();
  summary.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return summary;
}

}  // namespace tokenfeed
