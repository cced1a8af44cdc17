#include "prepare/prepare_text.hpp"

#include <tbb/parallel_for.h>
#include <tbb/parallel_pipeline.h>
#include <tbb/info.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "dataset/dataset_metadata.hpp"
#include "io/json_journal.hpp"
#include "io/staging_dir.hpp"
#include "prepare/corpus_shards.hpp"
#include "prepare/output_dir.hpp"
#include "prepare/stage_fence.hpp"
#include "prepare/text_inputs.hpp"
#include "prepare/text_parts.hpp"
#include "util/bounded_json.hpp"
#include "util/filesystem_errors.hpp"
#include "util/sha256.hpp"
#include "tokenfeed/log.hpp"
#include "tokenfeed/tokenizer.hpp"
#include "tokenfeed/version.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

// A run's staging directory holds its fixed description (the manifest, written once) and a
// journal of its finished shards, one line each, appended as each is finished: resuming
// replays the journal. Version 1 (tokenfeed before the journal) rewrote everything into the
// manifest after every shard.
constexpr const char* kManifestName = "prepare_text_manifest.json";
constexpr const char* kJournalName = "prepare_text_shards.jsonl";
constexpr int kManifestVersion = 2;
constexpr std::size_t kMaxRecordsPerChunk = 8192;

// Every reason a record can be skipped for, in the order they are reported.
const std::vector<std::string_view>& all_reasons() {
  static const std::vector<std::string_view> reasons = {
      kTextReasonInvalidJson, kTextReasonNotObject, kTextReasonMissingField, kTextReasonNotString,
      kTextReasonInvalidUtf8, kTextReasonTooLong,   kTextReasonTokenizer};
  return reasons;
}

// The built-in tokenizer or the caller's encoder, with the ids every document gets around it.
struct ResolvedTokenizer {
  std::unique_ptr<Tokenizer> builtin;  // null with the caller's encoder
  std::optional<std::uint32_t> eos, bos;
  std::uint64_t vocab_size = 0;
  ordered_json identity;  // what the metadata and the run key record of it
};

std::optional<std::uint32_t> named_token(const Tokenizer& tokenizer, const std::string& token, const char* option) {
  const std::optional<std::uint32_t> id = tokenizer.token_id(token);
  if (!id) {
    throw Error(ErrorKind::config, std::string(option) + " '" + token + "' is not a single token of the tokenizer");
  }
  return id;
}

ResolvedTokenizer resolve_tokenizer(const PrepareTextOptions& o) {
  ResolvedTokenizer t;
  if (o.encoder) {
    const EncoderIdentity& e = o.encoder_identity;
    if (o.append_eos && !e.eos_id) {
      throw Error(ErrorKind::config,
                  "the tokenizer defines no end-of-text token: name one with --eos-token, or "
                  "pass --no-eos");
    }
    if (o.prepend_bos && !e.bos_id) {
      throw Error(ErrorKind::config, "--bos: the tokenizer defines no beginning-of-sequence token");
    }
    t.eos = o.append_eos ? e.eos_id : std::nullopt;
    t.bos = o.prepend_bos ? e.bos_id : std::nullopt;
    t.vocab_size = e.vocab_size;
    t.identity = {{"kind", e.kind}, {"model", e.model_path}, {"sha256", e.model_sha256}, {"version", e.version}};
  } else {
    t.builtin = make_tokenizer(o.tokenizer);
    const TokenizerDescription d = t.builtin->describe();
    if (o.append_eos) {
      t.eos = o.eos_token ? named_token(*t.builtin, *o.eos_token, "--eos-token") : t.builtin->model_eos_id();
      if (!t.eos) {
        throw Error(ErrorKind::config, "tokenizer '" + o.tokenizer +
                                           "' defines no end-of-text token: name one with --eos-token, or pass "
                                           "--no-eos");
      }
    }
    if (o.prepend_bos) {
      t.bos = t.builtin->model_bos_id();
      if (!t.bos) throw Error(ErrorKind::config, "--bos: tokenizer '" + o.tokenizer + "' defines no BOS token");
    }
    // The model's own ids, and the special ids beyond them only when one is written.
    t.vocab_size = d.base_vocab_size;
    for (const auto& id : {t.eos, t.bos}) {
      if (id) t.vocab_size = std::max<std::uint64_t>(t.vocab_size, std::uint64_t{*id} + 1);
    }
    t.identity = {{"kind", d.kind},
                  {"model", d.model_path.empty() ? std::string() : recorded_path(d.model_path)},
                  {"sha256", d.model_sha256},
                  {"version", version()}};
  }
  if (t.vocab_size == 0 || t.vocab_size > (std::uint64_t{1} << 32)) {
    throw Error(ErrorKind::config, "the tokenizer's vocabulary size " + std::to_string(t.vocab_size) + " is unusable");
  }
  t.identity["vocab_size"] = t.vocab_size;
  t.identity["eos_token_id"] = t.eos ? ordered_json(*t.eos) : ordered_json(nullptr);
  t.identity["bos_token_id"] = t.bos ? ordered_json(*t.bos) : ordered_json(nullptr);
  return t;
}

void check_options(const PrepareTextOptions& o) {
  if (!(o.val_split >= 0.0 && o.val_split < 1.0)) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", o.val_split);
    throw Error(ErrorKind::config, std::string("--val-split must be in [0, 1) (train needs documents), got ") + value);
  }
  if (o.shard_tokens == 0) throw Error(ErrorKind::config, "--shard-tokens must be positive");
  if (o.read.max_document_bytes == 0 || o.batch_bytes == 0) {
    throw Error(ErrorKind::config, "the document size limit and batch bytes must be positive");
  }
  if (o.workers < 0) throw Error(ErrorKind::config, "--workers must be 0 (all cores) or positive");
  if (o.read.text_field.empty()) throw Error(ErrorKind::config, "--text-field must not be empty");
  if (!(o.verify_fraction >= 0.0 && o.verify_fraction <= 1.0)) {
    char value[32];
    std::snprintf(value, sizeof value, "%g", o.verify_fraction);
    throw Error(ErrorKind::config, std::string("--verify-sample must be in [0, 1], got ") + value);
  }
  if (o.tokenizer_impl != "auto" && o.tokenizer_impl != "native" && o.tokenizer_impl != "tokenizers") {
    throw Error(ErrorKind::config,
                "--tokenizer-impl must be auto, native or tokenizers, not '" + o.tokenizer_impl + "'");
  }
  if (o.verify_encoder && o.encoder) {
    throw Error(ErrorKind::config, "a verify encoder checks the built-in tokenizer, not the caller's encoder");
  }
}

void check_stop(const PrepareTextOptions& o) {
  if (o.stop_requested != nullptr && o.stop_requested->load(std::memory_order_relaxed)) throw PrepareInterrupted();
}

// A chunk of consecutive records: read together, parsed and tokenized by one worker, written
// in input order.
struct RecordChunk {
  std::vector<TextRecord> records;
  std::vector<std::vector<std::uint32_t>> ids;  // per record (documents only)
  std::vector<std::uint8_t> val;                // per record
  std::vector<std::uint8_t> verify;             // per record: in the verify sample
  std::uint64_t bytes_read_after = 0;           // input bytes consumed through this chunk
};

// Owns every chunk in flight (a cancelled pipeline leaks nothing) and reuses them.
// Thread-safety: acquire/release from any thread.
class ChunkPool {
 public:
  RecordChunk* acquire() {
    const MutexLock lock(mutex_);
    if (free_.empty()) {
      all_.push_back(std::make_unique<RecordChunk>());
      return all_.back().get();
    }
    RecordChunk* c = free_.back();
    free_.pop_back();
    return c;
  }
  void release(RecordChunk* c) {
    c->records.clear();
    c->ids.clear();
    c->val.clear();
    const MutexLock lock(mutex_);
    free_.push_back(c);
  }

 private:
  Mutex mutex_;
  std::vector<std::unique_ptr<RecordChunk>> all_ TF_GUARDED_BY(mutex_);
  std::vector<RecordChunk*> free_ TF_GUARDED_BY(mutex_);
};

// Where the input stands: the records of `file` up to `units` are done.
struct InputPosition {
  std::uint32_t file = 0;
  std::uint64_t units = 0;
};

// Reads the inputs' records in order from a position on.
class CorpusReader {
 public:
  CorpusReader(const std::vector<TextInputFile>& inputs, const TextReadOptions& options, InputPosition from)
      : inputs_(inputs), options_(options), file_(from.file), skip_(from.units) {
    for (std::uint32_t i = 0; i < from.file && i < inputs.size(); ++i) done_bytes_ += text_input_read_bytes(inputs[i]);
  }

  // The next record; false when every file is read.
  bool next(TextRecord& r) {
    while (file_ < inputs_.size()) {
      if (!reader_)
        reader_ = std::make_unique<TextFileReader>(inputs_[file_], file_, options_, std::exchange(skip_, 0));
      if (reader_->next(r)) return true;
      done_bytes_ += text_input_read_bytes(inputs_[file_]);
      reader_.reset();
      ++file_;
    }
    return false;
  }
  // Raw input bytes consumed (finished files at their size on disk).
  std::uint64_t bytes_read() const noexcept { return done_bytes_ + (reader_ ? reader_->bytes_read() : 0); }

 private:
  const std::vector<TextInputFile>& inputs_;
  const TextReadOptions& options_;
  std::uint32_t file_;
  std::uint64_t skip_;
  std::unique_ptr<TextFileReader> reader_;
  std::uint64_t done_bytes_ = 0;
};

// The figures of the run, as the manifest saves and restores them.
struct Counters {
  CorpusSplitSummary train, val;
  std::map<std::string, SkippedLines> skipped;
  std::uint64_t blank_lines = 0;
  CorpusSplitSummary& split(bool val_split) { return val_split ? val : train; }
};

ordered_json split_counters_json(const CorpusSplitSummary& s) {
  return {{"documents", s.documents},
          {"tokens", s.tokens},
          {"empty_documents", s.empty_documents},
          {"skipped_lines", s.skipped_lines},
          {"shards", s.shards}};
}

CorpusSplitSummary split_counters_from(const nlohmann::json& j) {
  CorpusSplitSummary s;
  s.documents = j.at("documents").get<std::uint64_t>();
  s.tokens = j.at("tokens").get<std::uint64_t>();
  s.empty_documents = j.at("empty_documents").get<std::uint64_t>();
  s.skipped_lines = j.at("skipped_lines").get<std::uint64_t>();
  s.shards = j.at("shards").get<std::uint64_t>();
  return s;
}

ordered_json shard_json(const CorpusShard& shard) {
  ordered_json sums = ordered_json::object();
  for (const auto& [file, hex] : shard.sha256) sums[file] = hex;
  return {{"tokens", shard.tokens}, {"documents", shard.documents}, {"sha256", sums}};
}

CorpusShard shard_from(const nlohmann::json& j) {
  CorpusShard c;
  c.tokens = j.at("tokens").get<std::uint64_t>();
  c.documents = j.at("documents").get<std::uint64_t>();
  for (const auto& [file, hex] : j.at("sha256").items()) c.sha256[file] = hex.get<std::string>();
  return c;
}

// Each input's SHA-256 (hex), read on up to `workers` threads (0: all cores), a file each.
std::vector<std::string> input_digests(const std::vector<TextInputFile>& inputs, int workers) {
  std::vector<std::string> digests(inputs.size());
  const int cores = tbb::info::default_concurrency();
  tbb::task_arena arena(workers > 0 ? std::min(workers, cores) : cores);
  arena.execute([&] {
    tbb::parallel_for(std::size_t{0}, inputs.size(),
                      [&](std::size_t i) { digests[i] = sha256_file_hex(inputs[i].path); });
  });
  return digests;
}

// What a resumed run must share with the run it takes over: the inputs as they were (path,
// size, modification time, and with ResumeCheck::content their bytes' SHA-256: `digests`)
// and every option that changes the output.
ordered_json run_description(const PrepareTextOptions& o, const std::vector<TextInputFile>& inputs,
                             const std::vector<std::string>& digests, const ResolvedTokenizer& t, TokenDtype dtype) {
  ordered_json files = ordered_json::array();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const TextInputFile& f = inputs[i];
    files.push_back({{"path", recorded_path(f.path)}, {"bytes", f.bytes}, {"mtime_ns", f.mtime_ns}});
    if (!digests.empty() && !digests[i].empty()) files.back()["sha256"] = digests[i];
  }
  return {{"inputs", files},
          {"format", to_string(o.format)},
          {"text_field", o.read.text_field},
          {"doc_per", to_string(o.read.doc_per)},
          {"max_document_bytes", o.read.max_document_bytes},
          {"tokenizer", t.identity},
          {"val_split", o.val_split},
          {"seed", o.seed},
          {"shard_tokens", o.shard_tokens},
          {"token_dtype", to_string(dtype)},
          {"on_error", o.on_error == OnBadLine::fail ? "fail" : "skip"},
          {"tokenfeed_version", version()}};
}

std::string run_key(const ordered_json& run) {
  Sha256 sha;
  sha.update(run.dump());
  return Sha256::hex(sha.finish());
}

void write_json_atomically(const fs::path& path, const ordered_json& doc) {
  const fs::path tmp = path.parent_path() / ("." + path.filename().string() + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << doc.dump(2) << '\n';
    out.close();
    if (!out) throw Error(ErrorKind::io, "cannot write '" + tmp.string() + "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    throw Error(ErrorKind::io, "cannot rename '" + tmp.string() + "' to '" + path.string() + "': " + ec.message());
}

// Where a killed run stands, replayed from its manifest and journal: every finished shard,
// and the last journal line (the position, the counters and the open shards then).
struct ResumePoint {
  CorpusSplitState train, val;
  nlohmann::json last;
  std::uint64_t journal_bytes = 0;  // of its complete lines
};

// A leftover staging directory's run, when it is one this run can take over: its manifest
// is this version with this run key, and its journal has at least one complete line (a
// torn last line is left out). A manifest of another version (an older tokenfeed's, which
// rewrote every shard into it) is not taken over: the run starts from the beginning.
std::optional<ResumePoint> read_manifest(const fs::path& dir, const std::string& key) {
  std::ifstream in(dir / kManifestName, std::ios::binary);
  if (!in) return std::nullopt;
  try {
    const nlohmann::json m = parse_bounded_json(in);
    if (m.at("manifest_version").get<int>() != kManifestVersion || m.at("run_key").get<std::string>() != key) {
      return std::nullopt;
    }
    ResumePoint p;
    p.journal_bytes = read_json_journal(dir / kJournalName, [&p](const nlohmann::json& line) {
      CorpusSplitState& split = line.at("split").get<std::string>() == "val" ? p.val : p.train;
      if (line.at("index").get<std::uint64_t>() != split.finished.size()) {
        throw Error(ErrorKind::format, "the journal skips a shard");
      }
      split.finished.push_back(shard_from(line.at("shard")));
      p.last = line;
    });
    if (p.last.is_null()) return std::nullopt;  // no shard finished yet
    for (const auto& [name, split] : {std::pair{"train", &p.train}, std::pair{"val", &p.val}}) {
      split->open_tokens = p.last.at("open").at(name).at("tokens").get<std::uint64_t>();
      split->open_documents = p.last.at("open").at(name).at("documents").get<std::uint64_t>();
    }
    return p;
  } catch (const std::exception&) {
    return std::nullopt;  // torn, damaged or foreign: not resumable
  }
}

// The split writers, the counters, and the run's manifest: its description written once,
// and a journal line appended whenever a shard is finished.
class CorpusSink {
 public:
  // A new run (`resume` empty) writes its manifest and starts an empty journal; a resumed one
  // takes up where `resume` left off, its journal cut back to the complete lines.
  CorpusSink(const fs::path& root, const PrepareTextOptions& o, TokenDtype dtype, const std::string& key,
             const ordered_json& run, const std::optional<ResumePoint>& resume)
      : train_(root / "train", o.format, dtype, o.shard_tokens), val_(root / "val", o.format, dtype, o.shard_tokens) {
    if (resume) {
      restore(*resume);
    } else {
      fs::remove(root / kJournalName);
      write_json_atomically(root / kManifestName,
                            ordered_json{{"manifest_version", kManifestVersion}, {"run_key", key}, {"run", run}});
    }
    journal_ = std::make_unique<JsonJournal>(root / kJournalName, resume ? resume->journal_bytes : 0);
  }

  InputPosition position() const noexcept { return position_; }

  // The document `pieces` make, in order (begin-of-text, the text's ids, end-of-text).
  void add_document(bool val, std::span<const std::span<const std::uint32_t>> pieces) {
    (val ? val_ : train_).add(pieces, [this, val] { journal_shard(val); });
  }
  void done_with(const TextRecord& r) { position_ = {r.file, r.units_after}; }

  void finish(PrepareTextSummary& summary) {
    train_.finish();
    val_.finish();
    counters.train.shards = train_.finished_shards().size();
    counters.val.shards = val_.finished_shards().size();
    summary.train = counters.train;
    summary.val = counters.val;
    summary.skipped = counters.skipped;
    summary.blank_lines = counters.blank_lines;
  }

  // content_sha256 for the metadata: tokens shards by split ("train" -> file -> hex), episode
  // shards by shard directory ("train/shard_00000" -> file -> hex), as prepare records them.
  ordered_json checksums() const {
    ordered_json all = ordered_json::object();
    for (const auto& [name, writer] : {std::pair{"train", &train_}, std::pair{"val", &val_}}) {
      for (const CorpusShard& shard : writer->finished_shards()) {
        for (const auto& [file, hex] : shard.sha256) {
          const fs::path rel(file);
          const bool nested = rel.has_parent_path();
          const std::string key = nested ? std::string(name) + "/" + rel.parent_path().generic_string() : name;
          all[key][rel.filename().string()] = hex;
        }
      }
    }
    return all;
  }

  Counters counters;
  std::uint64_t shards_reused = 0;

 private:
  // Takes up where the journal's last line left off.
  void restore(const ResumePoint& p) {
    const auto& c = p.last.at("counters");
    counters.train = split_counters_from(c.at("train"));
    counters.val = split_counters_from(c.at("val"));
    counters.blank_lines = c.at("blank_lines").get<std::uint64_t>();
    for (const auto& [reason, s] : c.at("skipped").items()) {
      counters.skipped[reason] =
          SkippedLines{s.at("count").get<std::uint64_t>(), s.at("first_line").get<std::uint64_t>(),
                       s.at("first_detail").get<std::string>()};
    }
    train_.restore(p.train);
    val_.restore(p.val);
    shards_reused = train_.finished_shards().size() + val_.finished_shards().size();
    const auto& at = p.last.at("position");
    position_ = {at.at("file").get<std::uint32_t>(), at.at("units").get<std::uint64_t>()};
  }

  // Appends the shard `val`'s split just finished to the journal, with where the run stands,
  // right after the shard was finished and before the record that did not fit is counted or
  // written: the position, the counters and both splits agree. A line's size does not grow
  // with the run, so neither does the cost of a shard.
  void journal_shard(bool val) {
    train_.sync();
    val_.sync();
    const CorpusShardWriter& split = val ? val_ : train_;
    ordered_json skipped = ordered_json::object();
    for (const auto& [reason, s] : counters.skipped) {
      skipped[reason] = {{"count", s.count}, {"first_line", s.first_line}, {"first_detail", s.first_detail}};
    }
    // Finished shards are counted when the run ends, from the writers.
    const ordered_json line = {{"split", val ? "val" : "train"},
                               {"index", split.finished_shards().size() - 1},
                               {"shard", shard_json(split.finished_shards().back())},
                               {"position", {{"file", position_.file}, {"units", position_.units}}},
                               {"counters",
                                {{"train", split_counters_json(counters.train)},
                                 {"val", split_counters_json(counters.val)},
                                 {"blank_lines", counters.blank_lines},
                                 {"skipped", skipped}}},
                               {"open",
                                {{"train", {{"tokens", train_.open_tokens()}, {"documents", train_.open_documents()}}},
                                 {"val", {{"tokens", val_.open_tokens()}, {"documents", val_.open_documents()}}}}}};
    journal_->append(line.dump());
  }

  CorpusShardWriter train_, val_;
  std::unique_ptr<JsonJournal> journal_;
  InputPosition position_;
};

}  // namespace

const char* to_string(ResumeCheck check) noexcept { return check == ResumeCheck::content ? "content" : "stat"; }

TextDraws text_draws(std::string_view text, std::uint64_t seed) {
  Sha256 sha;
  static constexpr char kDomain[] = "tokenfeed-text-split-v1";
  sha.update(kDomain, sizeof kDomain);  // includes the terminating 0 byte
  std::uint8_t seed_bytes[8];
  for (int i = 0; i < 8; ++i) seed_bytes[i] = static_cast<std::uint8_t>(seed >> (8 * i));
  sha.update(seed_bytes, sizeof seed_bytes);
  sha.update(text);
  const Sha256::Digest digest = sha.finish();
  const auto draw = [&digest](std::size_t from) {
    std::uint64_t top = 0;
    for (std::size_t i = from; i < from + 8; ++i) top = (top << 8) | digest[i];
    return static_cast<double>(top >> 11) * 0x1.0p-53;
  };
  return {draw(0), draw(8)};
}

double text_split_point(std::string_view text, std::uint64_t seed) { return text_draws(text, seed).split; }

std::string format_text_progress(const PrepareTextProgress& p, bool terminal) {
  const double s = std::max(p.seconds, 1e-9);
  const auto bytes = static_cast<double>(p.input_bytes_read);
  const auto documents = static_cast<double>(p.documents);
  const auto tokens = static_cast<double>(p.tokens);
  const double fraction =
      p.input_bytes_total > 0 ? std::min(1.0, bytes / static_cast<double>(p.input_bytes_total)) : 0.0;
  char eta[32] = "--";
  if (p.done) {
    std::snprintf(eta, sizeof eta, "done in %.0fs", p.seconds);
  } else if (fraction > 0.001) {
    const double left = p.seconds * (1.0 - fraction) / fraction;
    std::snprintf(eta, sizeof eta, "ETA %dm%02ds", static_cast<int>(left) / 60, static_cast<int>(left) % 60);
  }
  char figures[160];
  std::snprintf(figures, sizeof figures, "%5.1f%%  %llu docs  %.0f docs/s  %.2fM tok/s  %.1f MB/s  %s",
                100.0 * fraction, static_cast<unsigned long long>(p.documents), documents / s, tokens / s / 1e6,
                bytes / s / 1e6, eta);
  if (!terminal) return std::string("prepare-text: ") + figures;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(fraction * kWidth + 0.5);
  return "[" + std::string(static_cast<std::size_t>(filled), '#') +
         std::string(static_cast<std::size_t>(kWidth - filled), '.') + "] " + figures;
}

namespace {

// One run: the setup, then read -> parse (parallel) -> encode -> write (in order).
class TextCorpusRun {
 public:
  explicit TextCorpusRun(const PrepareTextOptions& o) : o_(o), started_(Clock::now()) {}

  // The inputs this run reads (a task's share, or all), its description (the manifest's, and
  // the metadata's source), and the directory it makes.
  struct Setup {
    std::vector<TextInputFile> inputs;
    ordered_json run;
    fs::path out_dir;
  };

  Setup set_up(TokenDtype dtype) {
    Setup s;
    const std::vector<TextInputFile> all = expand_text_inputs(o_.inputs);
    for (const TextInputFile& f : all) source_bytes_ += f.bytes;
    s.out_dir = normalized_output(o_.output_dir);
    if (!o_.task) {
      s.inputs = all;
      const std::vector<std::string> digests =
          o_.resume_check == ResumeCheck::content ? input_digests(all, o_.workers) : std::vector<std::string>();
      s.run = run_description(o_, all, digests, tokenizer_, dtype);
      return s;
    }
    if (o_.task->count == 0 || o_.task->index >= o_.task->count) {
      throw Error(ErrorKind::config, "--task " + std::to_string(o_.task->index) + " is not below --num-tasks " +
                                         std::to_string(o_.task->count));
    }
    TextTaskPlan plan = plan_text_task(all, o_.read, *o_.task);
    // The whole preparation's key leaves out what differs between tasks: the part, and the
    // digests, of only the files each task reads.
    const std::string job_key = run_key(run_description(o_, all, {}, tokenizer_, dtype));
    s.out_dir = claim_text_task(s.out_dir, *o_.task, plan.max_part_bytes, job_key);
    std::vector<std::string> digests;
    if (o_.resume_check == ResumeCheck::content) {
      std::vector<TextInputFile> read;
      std::vector<std::size_t> at;
      for (const ordered_json& range : plan.description.at("ranges")) {
        const auto file = range.at("file").get<std::size_t>();
        if (!at.empty() && at.back() == file) continue;
        at.push_back(file);
        read.push_back(all[file]);
      }
      const std::vector<std::string> some = input_digests(read, o_.workers);
      digests.assign(all.size(), std::string());
      for (std::size_t k = 0; k < at.size(); ++k) digests[at[k]] = some[k];
    }
    s.run = run_description(o_, all, digests, tokenizer_, dtype);
    plan.description["job_key"] = job_key;
    s.run["part"] = plan.description;
    s.inputs = std::move(plan.inputs);
    return s;
  }

  PrepareTextSummary run() {
    check_options(o_);
    tokenizer_ = resolve_tokenizer(o_);
    const TokenDtype dtype = choose_token_dtype(o_.token_dtype, tokenizer_.vocab_size);
    const Setup setup = set_up(dtype);
    const std::vector<TextInputFile>& inputs = setup.inputs;
    const ordered_json& run = setup.run;
    check_stop(o_);
    const std::string key = run_key(run);
    for (const TextInputFile& f : inputs) total_bytes_ += text_input_read_bytes(f);

    const fs::path& out_dir = setup.out_dir;
    check_output_dir(out_dir);
    std::error_code ec;
    fs::create_directories(out_dir.parent_path(), ec);
    if (ec) throw Error(ErrorKind::io, "cannot create '" + out_dir.parent_path().string() + "': " + ec.message());

    std::unique_ptr<StagingDir> staging;
    std::optional<ResumePoint> manifest;
    if (o_.resume) {
      staging = StagingDir::adopt_stale(out_dir, [&](const fs::path& dir) {
        manifest = read_manifest(dir, key);
        return manifest.has_value();
      });
    }
    summary_.removed_stale_dirs = remove_stale_staging_dirs(out_dir);
    if (!staging) staging = std::make_unique<StagingDir>(out_dir);
    check_stop(o_);

    CorpusSink sink(staging->path(), o_, dtype, key, run, manifest);
    const InputPosition from = sink.position();
    if (manifest) {
      summary_.resumed = true;
      summary_.shards_reused = sink.shards_reused;
      log_line(LogLevel::info, "[tokenfeed] prepare-text: resuming '" + out_dir.string() + "' with " +
                                   std::to_string(sink.shards_reused) + " finished shard(s) kept");
    } else if (o_.resume) {
      log_line(LogLevel::info, "[tokenfeed] prepare-text: no interrupted run of '" + out_dir.string() +
                                   "' with these inputs and options; starting from the beginning");
    }
    CorpusReader reader(inputs, o_.read, from);
    documents_ = sink.counters.train.documents + sink.counters.val.documents;
    tokens_ = sink.counters.train.tokens + sink.counters.val.tokens;
    try {
      write_all(reader, sink, inputs);
    } catch (const PrepareInterrupted&) {
      staging->keep();  // resumable from the last finished shard
      throw;
    }
    sink.finish(summary_);
    if (summary_.train.documents == 0 && !o_.task) {  // a task's part may be empty: the merge checks
      throw Error(ErrorKind::format, "no document landed in train (" + std::to_string(summary_.val.documents) +
                                         " in val, " +
                                         std::to_string(summary_.train.empty_documents + summary_.val.empty_documents) +
                                         " empty): the train split needs at least one");
    }
    if (summary_.val.documents == 0) fs::remove_all(staging->path() / "val", ec);
    fs::remove(staging->path() / kManifestName, ec);
    fs::remove(staging->path() / kJournalName, ec);

    summary_.input_files = inputs.size();
    summary_.input_bytes = total_bytes_;
    summary_.written = out_dir;
    summary_.token_dtype = dtype;
    summary_.vocab_size = tokenizer_.vocab_size;
    summary_.eos_id = tokenizer_.eos;
    summary_.bos_id = tokenizer_.bos;
    write_metadata_document(staging->path(), metadata(run, sink.checksums()));
    report(total_bytes_, true);
    check_output_dir(out_dir);
    check_stop(o_);
    staging->commit();
    summary_.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    return summary_;
  }

 private:
  ordered_json metadata(const ordered_json& run, const ordered_json& checksums) const {
    DatasetMetadata fields;
    fields.token_dtype = summary_.token_dtype;
    fields.vocab_size = static_cast<std::int64_t>(summary_.vocab_size);
    if (summary_.eos_id) {
      fields.eos_token_id = *summary_.eos_id;
      if (o_.format == CorpusFormat::episodes) fields.pad_token_id = *summary_.eos_id;
    }
    ordered_json meta = dataset_metadata_fields(fields, nullptr);
    meta["bos_token_id"] = summary_.bos_id ? ordered_json(*summary_.bos_id) : ordered_json(nullptr);
    meta["corpus_format"] = to_string(o_.format);
    meta["tokenizer"] = run.at("tokenizer");
    meta["splits"] = {{"train", split_counters_json(summary_.train)}, {"val", split_counters_json(summary_.val)}};
    meta["documents"] = {{"end_of_text", summary_.eos_id ? "appended" : "none"},
                         {"beginning_of_sequence", summary_.bos_id ? "prepended" : "none"},
                         {"doc_per", to_string(o_.read.doc_per)},
                         {"text_field", o_.read.text_field},
                         {"blank_lines", summary_.blank_lines}};
    meta["split"] = {{"rule", "tokenfeed-text-split-v1 (sha256 of seed and document bytes)"},
                     {"seed", o_.seed},
                     {"val_split", o_.val_split}};
    ordered_json skipped = ordered_json::object();
    for (const std::string_view reason : all_reasons()) {
      const auto it = summary_.skipped.find(std::string(reason));
      skipped[std::string(reason)] = it == summary_.skipped.end() ? 0 : it->second.count;
    }
    meta["skipped"] = skipped;
    meta["on_error"] = o_.on_error == OnBadLine::fail ? "fail" : "skip";
    meta["source"] = {{"files", run.at("inputs").size()}, {"bytes", source_bytes_}, {"inputs", run.at("inputs")}};
    meta["content_sha256"] = checksums;
    meta["created_by"] = "tokenfeed prepare-text";
    meta["tokenfeed_version"] = version();
    if (run.contains("part")) meta["part"] = run.at("part");  // prepare-text --merge's record
    return meta;
  }

  void report(std::uint64_t bytes_read, bool done) {
    if (!o_.on_progress) return;
    PrepareTextProgress p;
    p.input_bytes_read = bytes_read;
    p.input_bytes_total = total_bytes_;
    p.documents = documents_;
    p.tokens = tokens_;
    p.seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    p.done = done;
    o_.on_progress(p);
  }

  // Parses, splits and (built-in tokenizer) tokenizes one chunk. Parallel.
  void parse_chunk(RecordChunk& c) const {
    c.ids.resize(c.records.size());
    c.val.assign(c.records.size(), 0);
    c.verify.assign(c.records.size(), 0);
    for (std::size_t i = 0; i < c.records.size(); ++i) {
      TextRecord& r = c.records[i];
      parse_text_record(r, o_.read);
      if (r.kind == TextRecord::Kind::blank) continue;
      const TextDraws draws = text_draws(r.text, o_.seed);
      c.val[i] = draws.split < o_.val_split ? 1 : 0;
      c.verify[i] = draws.verify < o_.verify_fraction ? 1 : 0;
      if (r.kind != TextRecord::Kind::text || !tokenizer_.builtin) continue;
      try {
        tokenizer_.builtin->encode(r.text, c.ids[i]);
        // Only the ids are written: a long text is not held twice, unless the verifier still
        // has to encode it (verify_chunk releases it then).
        if (c.verify[i] == 0 || !verifying()) std::string().swap(r.text);
      } catch (const Error& e) {
        r.kind = TextRecord::Kind::bad;
        r.reason = kTextReasonTokenizer;
        r.detail = e.what();
      }
    }
  }

  // `encoder`'s ids of a chunk's documents (only those in the verify sample when `sample`),
  // with their records' indexes in `at`. Serial, in order.
  static std::vector<std::vector<std::uint32_t>> encode_records(DocumentEncoder& encoder, const char* who,
                                                                const RecordChunk& c, bool sample,
                                                                std::vector<std::size_t>& at) {
    std::vector<std::string_view> texts;
    for (std::size_t i = 0; i < c.records.size(); ++i) {
      if (c.records[i].kind != TextRecord::Kind::text || (sample && c.verify[i] == 0)) continue;
      texts.push_back(c.records[i].text);
      at.push_back(i);
    }
    std::vector<std::vector<std::uint32_t>> ids(texts.size());
    if (texts.empty()) return ids;
    encoder.encode(texts, ids);
    if (ids.size() != texts.size()) {
      throw Error(ErrorKind::pipeline, std::string(who) + " returned " + std::to_string(ids.size()) + " id lists for " +
                                           std::to_string(texts.size()) + " texts");
    }
    return ids;
  }

  // The caller's encoder over a chunk's documents. Serial, in order.
  void encode_chunk(RecordChunk& c) const {
    std::vector<std::size_t> at;
    std::vector<std::vector<std::uint32_t>> ids = encode_records(*o_.encoder, "the encoder", c, false, at);
    for (std::size_t k = 0; k < at.size(); ++k) {
      c.ids[at[k]] = std::move(ids[k]);
      std::string().swap(c.records[at[k]].text);  // only the ids are written from here
    }
  }

  // The verify sample of a chunk encoded again by the verifier, and compared. Serial, in order.
  void verify_chunk(RecordChunk& c, const std::vector<std::string>& names) {
    std::vector<std::size_t> at;
    const std::vector<std::vector<std::uint32_t>> ids = encode_records(*o_.verify_encoder, "the verifier", c, true, at);
    for (std::size_t k = 0; k < at.size(); ++k) {
      const std::vector<std::uint32_t>& ours = c.ids[at[k]];
      const std::vector<std::uint32_t>& theirs = ids[k];
      if (ours == theirs) continue;
      const auto [a, b] = std::mismatch(ours.begin(), ours.end(), theirs.begin(), theirs.end());
      const auto position = static_cast<std::size_t>(a - ours.begin());
      const auto id_at = [](const std::vector<std::uint32_t>& v, std::vector<std::uint32_t>::const_iterator it) {
        return it == v.end() ? std::string("the end") : "id " + std::to_string(*it);
      };
      const TextRecord& r = c.records[at[k]];
      throw Error(ErrorKind::format, names[r.file] + ":" + std::to_string(r.line) + ": tokenizer '" + o_.tokenizer +
                                         "' and the verifier disagree at token " + std::to_string(position) + " (" +
                                         id_at(ours, a) + " against " + id_at(theirs, b) + "; " +
                                         std::to_string(ours.size()) + " against " + std::to_string(theirs.size()) +
                                         " ids): the run is stopped, nothing is written");
    }
    for (const std::size_t i : at) std::string().swap(c.records[i].text);  // only the ids are written from here
    summary_.verified_documents += at.size();
  }

  void count_bad(Counters& counters, const TextRecord& r, bool val, const std::string& where) const {
    if (o_.on_error == OnBadLine::fail) throw Error(ErrorKind::format, where + ": " + r.reason + ": " + r.detail);
    SkippedLines& s = counters.skipped[r.reason];
    if (s.count++ == 0) {
      s.first_line = r.line;
      s.first_detail = where + ": " + r.detail;
    }
    ++counters.split(val).skipped_lines;
  }

  // Writes one chunk's records in order. Serial.
  void write_chunk(RecordChunk& c, CorpusSink& sink, const std::vector<std::string>& names) {
    Counters& counters = sink.counters;
    for (std::size_t i = 0; i < c.records.size(); ++i) {
      const TextRecord& r = c.records[i];
      const bool val = c.val[i] != 0;
      switch (r.kind) {
        case TextRecord::Kind::blank:
          counters.blank_lines += r.repeat;
          break;
        case TextRecord::Kind::empty:
          counters.split(val).empty_documents += r.repeat;
          break;
        case TextRecord::Kind::bad:
          count_bad(counters, r, val, names[r.file] + ":" + std::to_string(r.line));
          break;
        case TextRecord::Kind::json_line:  // parsed by now
        case TextRecord::Kind::text: {
          const std::vector<std::uint32_t>& ids = c.ids[i];
          for (const std::uint32_t id : ids) {
            if (id >= tokenizer_.vocab_size) {
              throw Error(ErrorKind::format, names[r.file] + ":" + std::to_string(r.line) + ": the tokenizer gave id " +
                                                 std::to_string(id) + ", outside its vocabulary of " +
                                                 std::to_string(tokenizer_.vocab_size));
            }
          }
          // The ids are written where they are, between the special ids: a long document is
          // never copied whole.
          const std::span<const std::uint32_t> bos =
              tokenizer_.bos ? std::span<const std::uint32_t>(&*tokenizer_.bos, 1) : std::span<const std::uint32_t>();
          const std::span<const std::uint32_t> eos =
              tokenizer_.eos ? std::span<const std::uint32_t>(&*tokenizer_.eos, 1) : std::span<const std::uint32_t>();
          const std::uint64_t tokens = bos.size() + ids.size() + eos.size();
          if (tokens == 0) {  // a text the tokenizer gives no ids for, with nothing around it
            ++counters.split(val).empty_documents;
            break;
          }
          const std::span<const std::uint32_t> pieces[] = {bos, ids, eos};
          sink.add_document(val, pieces);
          c.ids[i] = {};  // released now rather than with the chunk
          CorpusSplitSummary& s = counters.split(val);
          ++s.documents;
          s.tokens += tokens;
          ++documents_;
          tokens_ += tokens;
          break;
        }
      }
      sink.done_with(r);
    }
  }

  // Between parse and write, serial and in order: the caller's encoder, or the verifier.
  void encode_or_verify_chunk(RecordChunk& c, const std::vector<std::string>& names) {
    if (o_.encoder) {
      encode_chunk(c);
    } else {
      verify_chunk(c, names);
    }
  }

  void write_all(CorpusReader& reader, CorpusSink& sink, const std::vector<TextInputFile>& inputs) {
    std::vector<std::string> names;
    for (const TextInputFile& f : inputs) {
      // A byte range's lines are counted from its start.
      names.push_back(f.whole() ? f.path.string() : f.path.string() + " (from byte " + std::to_string(f.begin) + ")");
    }
    bool input_done = false;
    ChunkPool pool;
    Clock::time_point last_report = Clock::now();
    const auto read = [&](tbb::flow_control& fc) -> RecordChunk* {
      const StageFence fence;
      check_stop(o_);
      RecordChunk* c = pool.acquire();
      std::size_t bytes = 0;
      TextRecord r;
      while (c->records.size() < kMaxRecordsPerChunk && bytes < o_.batch_bytes) {
        if (!reader.next(r)) {
          input_done = true;
          break;
        }
        bytes += r.text.size() + r.repeat;  // a run of empty lines: its line ends
        c->records.push_back(std::move(r));
      }
      c->bytes_read_after = reader.bytes_read();
      if (c->records.empty()) {
        pool.release(c);
        fc.stop();
        return nullptr;
      }
      return c;
    };
    const auto parse = [&](RecordChunk* c) {
      const StageFence fence;
      parse_chunk(*c);
      return c;
    };
    const auto encode_or_verify = [&](RecordChunk* c) {
      const StageFence fence;
      check_stop(o_);
      encode_or_verify_chunk(*c, names);
      return c;
    };
    const auto write = [&](RecordChunk* c) {
      const StageFence fence;
      check_stop(o_);
      write_chunk(*c, sink, names);
      const Clock::time_point now = Clock::now();
      if (std::chrono::duration<double>(now - last_report).count() >= o_.progress_interval_seconds) {
        last_report = now;
        report(c->bytes_read_after, false);
      }
      pool.release(c);
    };

    // More threads than cores only make TBB warn: the output is the same for any count.
    const int cores = tbb::info::default_concurrency();
    tbb::task_arena arena(o_.workers > 0 ? std::min(o_.workers, cores) : cores);
    const auto live = static_cast<std::size_t>(std::clamp(2 * arena.max_concurrency() + 2, 4, 64));
    auto head = tbb::make_filter<void, RecordChunk*>(tbb::filter_mode::serial_in_order, read) &
                tbb::make_filter<RecordChunk*, RecordChunk*>(tbb::filter_mode::parallel, parse);
    auto tail = tbb::make_filter<RecordChunk*, void>(tbb::filter_mode::serial_in_order, write);
    publish_to_stages();
    try {
      arena.execute([&] {
        if (o_.encoder || verifying()) {
          tbb::parallel_pipeline(
              live,
              head & tbb::make_filter<RecordChunk*, RecordChunk*>(tbb::filter_mode::serial_in_order, encode_or_verify) &
                  tail);
        } else {
          tbb::parallel_pipeline(live, head & tail);
        }
      });
    } catch (...) {
      acquire_from_stages();
      throw;
    }
    acquire_from_stages();
    if (!input_done) throw Error(ErrorKind::pipeline, "prepare-text: the input was not read to its end");
  }

  bool verifying() const { return o_.verify_encoder != nullptr && o_.verify_fraction > 0; }

  const PrepareTextOptions& o_;
  Clock::time_point started_;
  ResolvedTokenizer tokenizer_;
  PrepareTextSummary summary_;
  std::uint64_t total_bytes_ = 0;   // read by this run (a task's share)
  std::uint64_t source_bytes_ = 0;  // of every input
  std::uint64_t documents_ = 0, tokens_ = 0;
};

}  // namespace

PrepareTextSummary prepare_text_corpus(const PrepareTextOptions& options) {
  return filesystem_errors_as_io([&] { return TextCorpusRun(options).run(); });
}

}  // namespace tokenfeed
