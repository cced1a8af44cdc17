#include "tokenfeed/loader.hpp"

#include <charconv>
#include <cstdio>
#include <set>
#include <map>
#include <mutex>
#include <optional>

#include "loader/audit_log.hpp"
#include "pipeline/batch_pool.hpp"
#include "dataset/content_fingerprint.hpp"
#include "dataset/dataset_metadata.hpp"
#include "modes/episode_batch_source.hpp"
#include "dataset/episode_dataset.hpp"
#include "sampling/episode_sampler.hpp"
#include "modes/epoch_orders.hpp"
#include "modes/episode_window.hpp"
#include "modes/mixture_batch_source.hpp"
#include "sampling/mixture_schedule.hpp"
#include "modes/packed_batch_source.hpp"
#include "util/hash.hpp"
#include "util/checked_math.hpp"
#include "loader/resolved_options.hpp"
#include "loader/resume_state.hpp"
#include "pipeline/split_pipeline.hpp"
#include "dataset/token_stream.hpp"
#include "modes/token_stream_batch_source.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

std::string hex64(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

const char* bool_text(bool b) { return b ? "true" : "false"; }

constexpr std::uint64_t kMaxNumpySeed = 0xffffffffULL;
// No run reaches this many batches (2^53: 285 years at a million batches a second); a state
// past it is corrupt or forged, and refusing it keeps every step, row and counter
// computation far from overflow.
constexpr std::uint64_t kMaxResumeStep = 1ULL << 53;
// A packed epoch that forms no batch is skipped, at most 64 in a row before the loader
// refuses the split, so a run at step k is at most in epoch 64 * (k + 1).
constexpr std::uint64_t kMaxEmptyEpochsInARow = 64;

// epoch_seed + epoch as the audit log records it: epoch_seed is validated to [0, 2^32-1]
// and resumed epochs to below 2^60, so the unsigned sum cannot wrap.
std::string epoch_seed_text(const Config& config, std::uint64_t epoch) {
  return std::to_string(static_cast<std::uint64_t>(config.epoch_seed) + epoch);
}

// Refuses a resume position no run of this config can reach. REQUIRES: a validated config.
void check_reachable(const std::string& name, const SplitPosition& pos, const Config& config, bool packed) {
  const auto refuse = [&](const std::string& what) {
    throw Error(ErrorKind::state, "invalid resume state: splits." + name + "." + what);
  };
  if (pos.step > kMaxResumeStep) {
    refuse("step=" + std::to_string(pos.step) + " is beyond any run (at most 2^53 batches)");
  }
  const std::uint64_t rows_per_step = global_batch_size(config);
  if (pos.step > (std::uint64_t{1} << 62) / rows_per_step) {
    refuse("step=" + std::to_string(pos.step) + " times batch_size * world_size overflows the sample counter");
  }
  if (packed && *config.batch_sampling_mode == SamplingMode::epoch) {
    if (pos.epoch > kMaxEmptyEpochsInARow * (pos.step + 1)) {
      refuse("epoch=" + std::to_string(pos.epoch) + " cannot be reached in " + std::to_string(pos.step) + " steps");
    }
    if (pos.batch_in_epoch > pos.step) {
      refuse("batch_in_epoch=" + std::to_string(pos.batch_in_epoch) + " exceeds step=" + std::to_string(pos.step));
    }
  }
}

// Where split `name` of `dataset_dir` keeps its data: its directory, else (a token stream's
// flat layout) NAME.bin.
std::filesystem::path split_data_path(const std::filesystem::path& dataset_dir, const std::string& name) {
  std::error_code ec;
  if (std::filesystem::is_directory(dataset_dir / name, ec)) return dataset_dir / name;
  return dataset_dir / (name + ".bin");
}

// The shape of the slots a loader with config `c` fills, with `rows` rows.
detail::BatchShape batch_shape_of(const Config& c, std::size_t rows, bool mask) {
  const bool episode = c.dataset_mode != DatasetMode::token_stream;
  const bool packed = c.dataset_mode == DatasetMode::sft_packed;
  detail::BatchShape shape;
  shape.rows = rows;
  shape.cols = static_cast<std::size_t>(c.block_size);
  shape.with_mask = mask;
  shape.with_document_fields = c.document_aware;
  shape.y_is_labels = !episode || packed;
  shape.contract_fields = c.contract_fields;
  // sft_episode's mask equals its token weights, so with both only the weights are written.
  shape.mask_is_weights = packed || (episode && c.contract_fields);
  shape.packed = packed;
  return shape;
}

}  // namespace

struct Loader::Impl {
  struct Split {
    std::string name;
    std::optional<EpisodeSplit> episodes;    // sft_episode
    std::optional<TokenStreamSplit> stream;  // token_stream
    std::unique_ptr<EpisodeWindows> windows;  // SFT modes: what a row keeps of an episode
    std::unique_ptr<EpisodeSampler> sampler;  // over kept episode ids, or window ids
    std::unique_ptr<EpochOrders> orders;      // the sampler's orders in use (epoch mode)
    std::unique_ptr<BatchSource> source;
    std::shared_ptr<detail::BatchPool> pool;
    std::unique_ptr<SplitPipeline> pipeline;  // created on first get_batch
    std::uint64_t consumed = 0;               // batches the trainer took: the next step
    std::uint64_t next_epoch = 0;             // the next batch's place in its epoch
    std::uint64_t next_batch_in_epoch = 0;
    std::uint64_t next_row_in_epoch = 0;  // sft_packed
    // The epoch whose start (or resumption) was last logged; a run that starts or resumes
    // mid-epoch logs epoch_resume for it, so that every epoch_complete has an opening line.
    std::optional<std::uint64_t> announced_epoch;
    bool mask = false;
    std::uint64_t fingerprint = 0;
    SplitStats stats;
    // Why this split cannot form one batch in epoch mode (val only; train refuses to open):
    // get_batch on it throws Error(unusable_kind) with this text. Empty when usable.
    std::string unusable;
    ErrorKind unusable_kind = ErrorKind::config;
    // A mixture's split: its source (also `source`), its slots' shape, and per mixture
    // source the epoch whose start was last written to the audit log.
    MixtureBatchSource* mixture_source = nullptr;
    detail::BatchShape mixture_shape;
    std::vector<std::optional<std::uint64_t>> source_announced;
  };

  // The config settled against the dataset (resolve_options); config and metadata name
  // its parts. What the opened splits settle (an inferred dtype, use_loss_mask=auto) is
  // written back into it by open_splits.
  ResolvedOptions settled;
  Config& config = settled.config;
  const DatasetMetadata& metadata = settled.metadata;
  std::map<std::string, Split, std::less<>> splits;
  std::string fingerprint;
  std::unique_ptr<AuditLog> audit;
  // What the order depends on, by name; the fingerprint hashes them and
  // the resume state carries them, so that a refusal can name the field that differs.
  std::map<std::string, std::string> order_fields;

  std::mutex pipelines_mutex;  // guards pipeline creation against a concurrent stop()
  std::atomic<bool> stopped{false};

  // A mixture (Config::mixture): one Impl per source, opened on that source's keys with
  // batch_size 1 and world_size 1 so that its batch k is its row k (no pipeline of its
  // own; the mixture's splits read rows through its sources), and the schedule choosing
  // the source of each global row.
  std::vector<std::unique_ptr<Impl>> members;
  std::unique_ptr<MixtureSchedule> schedule;
  bool mixture() const noexcept { return !config.mixture.empty(); }
  void open_mixture();
  Config member_config(const MixtureSource& source) const;
  void on_consumed_mixture(Split& split, const detail::BatchSlot& slot);

  explicit Impl(Config c);
  // The SFT modes read episode-indexed datasets.
  bool episode_mode() const noexcept { return settled.episode_mode(); }
  bool packed_mode() const noexcept { return settled.packed_mode(); }
  // What a sampled id is called in messages: an episode or a window.
  const char* unit() const noexcept { return episode_mode() ? "episodes" : "windows"; }
  // Opens every split the dataset has, then settles what only they tell: the token and
  // mask dtypes when neither the config nor the metadata gave them, and use_loss_mask=auto.
  void open_splits();
  // Settles use_loss_mask=auto from the splits' mask.bin files, and logs the choice.
  void resolve_use_loss_mask();
  void open_episode_split(const std::string& name, const fs::path& dir);
  void open_stream_split(const std::string& name);
  Split& find(std::string_view name);
  const Split& find(std::string_view name) const { return const_cast<Impl*>(this)->find(name); }
  void on_consumed(Split& split, const detail::BatchSlot& slot);
  void check_forms_a_batch(Split& split);
  detail::BatchShape batch_shape(const Split& split) const {
    return mixture() ? split.mixture_shape
                     : batch_shape_of(config, static_cast<std::size_t>(config.batch_size), split.mask);
  }
  // prefetch_depth 0 (auto): a start and a cap under prefetch_memory_mb.
  SplitPipeline::Depths pool_depths(const detail::BatchShape& shape) const {
    return SplitPipeline::plan_depths(
        config.prefetch_depth, config.prefetch_memory_mb, detail::BatchPool::bytes_per_slot(shape),
        static_cast<std::size_t>(config.decode_threads), static_cast<std::size_t>(config.max_held_batches));
  }
  void check_memory_bound() const;
  SplitPosition next_position(const Split& split) const {
    return SplitPosition{split.consumed, split.next_epoch, split.next_batch_in_epoch, split.next_row_in_epoch};
  }
  // Batches in the epoch of the next batch (packed epochs differ, and may be entered mid-batch).
  std::uint64_t batches_in_next_epoch(const Split& split) const {
    if (packed_mode()) {
      return static_cast<const PackedBatchSource&>(*split.source).batches_in_epoch_at(next_position(split));
    }
    return split.source->batches_in_epoch(split.next_epoch);
  }
  std::string explain_mismatch(const ResumeState& state) const;
  // What the order depends on (order_fields) and its hash (fingerprint).
  void make_fingerprint();
  // The audit log's dataset_load record, and the one info line at open.
  void announce_open();
  void stop_pipelines();
};

Loader::Impl::Impl(Config c) : settled(resolve_options(std::move(c))) {
  if (mixture()) {
    open_mixture();
    return;
  }
  open_splits();
  make_fingerprint();
  check_memory_bound();
  announce_open();
}

void Loader::Impl::open_splits() {
  if (episode_mode()) {
    std::error_code ec;
    for (const char* name : kSplitNames) {
      const fs::path dir = config.dataset_dir / name;
      if (fs::exists(dir, ec)) open_episode_split(name, dir);
      // The dtype inferred for train is the dataset's: val is validated with it rather
      // than inferred on its own, so the two can never be read at different widths.
      if (!config.token_dtype && splits.count(name) != 0) config.token_dtype = splits.at(name).episodes->token_dtype();
    }
    // The token dtype every split agreed on (or was given) is the effective one; the same
    // for the mask's.
    if (!config.token_dtype) config.token_dtype = splits.at("train").episodes->token_dtype();
    if (!config.mask_dtype) config.mask_dtype = splits.at("train").episodes->mask_file_dtype();
    resolve_use_loss_mask();
  } else {
    for (const char* name : kSplitNames) {
      if (std::string_view(name) == "train" || TokenStreamSplit::has_split(config.dataset_dir, name)) {
        open_stream_split(name);
      }
    }
    if (!config.token_dtype) config.token_dtype = splits.at("train").stream->common_dtype();
  }
}

void Loader::Impl::make_fingerprint() {
  // The order depends on the global batch (batch_size x world_size), never on its split
  // across ranks: a state resumes at another world size with the same global batch.
  order_fields["dataset_mode"] = to_string(config.dataset_mode);
  for (const auto& [name, split] : splits) {
    order_fields["data." + name] = hex64(split.fingerprint);  // layout, lengths, dtype
    // The tokens themselves (dataset/content_fingerprint.hpp: every byte, or sampled blocks).
    order_fields["content." + name] = hex64(content_fingerprint(split_data_path(config.dataset_dir, name)));
  }
  order_fields["batch_sampling_mode"] = to_string(*config.batch_sampling_mode);
  order_fields["global_batch_size"] = std::to_string(global_batch_size(config));
  order_fields["epoch_seed"] = std::to_string(config.epoch_seed);
  order_fields["epoch_shuffle"] = bool_text(config.epoch_shuffle);
  order_fields["epoch_drop_last"] = bool_text(config.epoch_drop_last);
  if (episode_mode()) order_fields["episode_min_tokens"] = std::to_string(config.episode_min_tokens);
  // Per-split overrides, only when given: a config without them keeps its fingerprint.
  for (const auto& [name, overrides] :
       {std::pair{"train", config.train_overrides}, std::pair{"val", config.val_overrides}}) {
    if (!overrides.epoch_shuffle && !overrides.epoch_drop_last) continue;
    order_fields[std::string(name) + ".epoch_shuffle"] = bool_text(config.shuffle_for(name));
    order_fields[std::string(name) + ".epoch_drop_last"] = bool_text(config.drop_last_for(name));
  }
  if (packed_mode()) {
    // Rows depend on how episodes are cut and on the row length.
    order_fields["block_size"] = std::to_string(config.block_size);
    order_fields["pack_lookahead"] = std::to_string(config.pack_lookahead);
    order_fields["truncation"] = to_string(config.truncation);
  } else if (episode_mode() && config.truncation == Truncation::split) {
    // Rows are pieces, cut at block_size + 1 (other rules keep one row per episode, so
    // their fingerprints do not name the rule).
    order_fields["block_size"] = std::to_string(config.block_size);
    order_fields["truncation"] = to_string(config.truncation);
  } else if (!episode_mode()) {
    order_fields["block_size"] = std::to_string(config.block_size);  // windows are carved at block_size + 1
  }
  Hasher h;
  h.add(std::string_view("tokenfeed-order-v2"));
  for (const auto& [key, value] : order_fields) {
    h.add(std::string_view(key));
    h.add(std::string_view(value));
  }
  fingerprint = hex64(h.digest());
}

void Loader::Impl::announce_open() {
  audit = std::make_unique<AuditLog>(config.audit_log_dir, static_cast<long>(config.rank));
  AuditLog::Fields fields;
  for (auto& [key, value] : config_entries(config)) fields.emplace_back(std::move(key), std::move(value));
  fields.emplace_back("dataset_fingerprint", fingerprint);
  for (const auto& [name, split] : splits) {
    if (split.episodes) fields.emplace_back("num_" + name + "_episodes", std::to_string(split.episodes->num_episodes()));
    fields.emplace_back(std::string(episode_mode() ? "kept_" : "sampled_") + name + "_" + unit(),
                        std::to_string(split.sampler->kept_size()));
  }
  audit->write("dataset_load", fields);

  // The one line at open (the per-split details and epoch boundaries are debug lines).
  std::string line = "[tokenfeed] opened '" + config.dataset_dir.string() + "' mode=" + to_string(config.dataset_mode) +
                     " sampling=" + to_string(*config.batch_sampling_mode);
  for (const auto& [name, split] : splits) {
    line += " " + name + "=" + std::to_string(split.sampler->kept_size()) + (episode_mode() ? "_episodes" : "_windows");
  }
  line += std::string(" mask=") + bool_text(config.use_loss_mask.value_or(false)) +
          " rank=" + std::to_string(config.rank) + " world_size=" + std::to_string(config.world_size) + " (" +
          settled.rank_source + ")";
  if (episode_mode()) line += " pad_id=" + std::to_string(*config.pad_token_id) + " (" + settled.pad_source + ")";
  line += " audit_log=" + (audit->enabled() ? audit->path().string() : std::string("off"));
  log_line(LogLevel::info, line);
}

void Loader::Impl::resolve_use_loss_mask() {
  std::string with, without;
  for (const auto& [name, split] : splits) {
    std::string& list = split.episodes->mask_files_present() ? with : without;
    list += (list.empty() ? "" : ", ") + name;
  }
  settle_use_loss_mask(config, with, without);
}

void Loader::Impl::open_episode_split(const std::string& name, const fs::path& dir) {
  auto [it, inserted] = splits.emplace(name, Split{});
  Split& split = it->second;  // the map node keeps its address: the source may refer to it
  split.name = name;
  split.episodes.emplace(EpisodeSplit::open(dir, settled.episode_split_options()));
  const EpisodeSplit& data = *split.episodes;
  IdList kept = kept_episodes(data, static_cast<std::uint64_t>(config.episode_min_tokens));
  if (kept.empty()) {
    throw Error(ErrorKind::format, "split '" + dir.string() + "' has no episode left after filtering (" +
                                       std::to_string(data.num_episodes()) +
                                       " episodes, none with length >= episode_min_tokens=" +
                                       std::to_string(config.episode_min_tokens) + ")");
  }
  split.mask = data.has_mask();
  split.fingerprint = data.fingerprint();
  split.windows = settled.episode_windows(data);
  if (packed_mode()) {
    split.sampler = settled.episode_sampler(data, std::move(kept), settled.packed_order_settings(name));
    split.orders = std::make_unique<EpochOrders>(*split.sampler);
    split.source = std::make_unique<PackedBatchSource>(data, *split.windows, *split.orders,
                                                       settled.packing_options(name, split.mask));
  } else {
    split.sampler = settled.episode_sampler(data, std::move(kept), settled.sampler_settings(name));
    split.orders = std::make_unique<EpochOrders>(*split.sampler);
    split.source =
        std::make_unique<EpisodeBatchSource>(data, *split.orders, *split.windows, settled.episode_options(split.mask));
  }
  check_forms_a_batch(split);
  split.stats.prefetch_depth = static_cast<std::uint64_t>(config.prefetch_depth);
  split.stats.decode_threads = static_cast<std::uint64_t>(config.decode_threads);
  log_line(LogLevel::debug, "[tokenfeed] split=" + name + " episodes=" + std::to_string(data.num_episodes()) +
                                " kept=" + std::to_string(split.sampler->kept_size()) +
                                " tokens=" + std::to_string(data.total_tokens()) +
                                " shards=" + std::to_string(data.shards().size()) +
                                " dtype=" + to_string(data.token_dtype()) + " mask=" + bool_text(split.mask));
}

void Loader::Impl::open_stream_split(const std::string& name) {
  auto [it, inserted] = splits.emplace(name, Split{});
  Split& split = it->second;
  split.name = name;
  split.stream.emplace(TokenStreamSplit::open(config.dataset_dir, name, config.token_dtype));
  const TokenStreamSplit& data = *split.stream;
  const auto block = static_cast<std::size_t>(config.block_size);
  const std::uint64_t samples = TokenStreamBatchSource::sample_count(data, block, *config.batch_sampling_mode);
  if (samples == 0) {
    // Like a split too small for one batch (check_forms_a_batch): an error at open for
    // train, and for val only when it is used.
    split.unusable =
        "split '" + name + "' of '" + config.dataset_dir.string() + "' has " + std::to_string(data.total_tokens()) +
        " tokens but no file holds one window of block_size + 1 = " + std::to_string(block + 1) + " tokens";
    split.unusable_kind = ErrorKind::format;  // what train that small is at open
    if (name == "train") throw Error(split.unusable_kind, split.unusable);
    log_line(LogLevel::warning, "[tokenfeed] warning: " + split.unusable + "; get_batch(\"" + name + "\") will fail");
  }
  split.fingerprint = data.fingerprint();
  split.sampler = std::make_unique<EpisodeSampler>(EpisodeSampler::IdRange{samples}, settled.sampler_settings(name));
  split.orders = std::make_unique<EpochOrders>(*split.sampler);
  split.source = std::make_unique<TokenStreamBatchSource>(data, *split.orders, settled.stream_options());
  if (split.unusable.empty()) check_forms_a_batch(split);
  split.stats.prefetch_depth = static_cast<std::uint64_t>(config.prefetch_depth);
  split.stats.decode_threads = static_cast<std::uint64_t>(config.decode_threads);
  const auto dtype = data.common_dtype();
  log_line(LogLevel::debug, "[tokenfeed] split=" + name + " tokens=" + std::to_string(data.total_tokens()) +
                                " files=" + std::to_string(data.files().size()) +
                                " dtype=" + (dtype ? to_string(*dtype) : "mixed") + " " +
                                (*config.batch_sampling_mode == SamplingMode::epoch ? "windows=" : "window_starts=") +
                                std::to_string(samples) + " document_aware=" + bool_text(config.document_aware));
}

// In epoch mode with epoch_drop_last, a split smaller than one global batch yields no
// batch. For train that is an error at open; a small val split only fails when it is used,
// so that a trainer that never evaluates (or evaluates elsewhere) is not stopped by it.
void Loader::Impl::check_forms_a_batch(Split& split) {
  if (*config.batch_sampling_mode != SamplingMode::epoch) return;
  const std::uint64_t global = global_batch_size(config);
  if (packed_mode()) {
    // Packed batches continue into the next epoch, so they always form; a split whose
    // epoch does not fill one global batch would repeat episodes within a batch.
    const std::uint64_t rows = static_cast<const PackedBatchSource&>(*split.source).packing(0)->rows();
    if (!config.epoch_drop_last || rows >= global) return;
  } else if (split.source->batches_in_epoch(0) > 0) {
    return;
  }
  std::string what;
  if (packed_mode()) {
    what = std::to_string(split.sampler->kept_size()) + " kept episodes that pack into " +
           std::to_string(static_cast<const PackedBatchSource&>(*split.source).packing(0)->rows()) + " rows";
  } else {
    what = std::to_string(split.sampler->size()) + (episode_mode() ? " kept episodes" : " windows of block_size + 1");
    if (split.sampler->pieces() != nullptr) {
      what = std::to_string(split.sampler->kept_size()) + " kept episodes in " + std::to_string(split.sampler->size()) +
             " pieces (truncation=split)";
    }
  }
  split.unusable = "split '" + split.name + "' of '" + config.dataset_dir.string() + "' has " + what +
                   ", fewer than one global batch (batch_size x world_size = " + std::to_string(global) +
                   ") with epoch_drop_last=true; set epoch_drop_last=false (or " + split.name +
                   ".epoch_drop_last) or a smaller batch_size";
  if (split.name == "train") throw Error(ErrorKind::config, split.unusable);
  log_line(LogLevel::warning, "[tokenfeed] warning: " + split.unusable + "; get_batch(\"" + split.name + "\") will fail");
}

Loader::Impl::Split& Loader::Impl::find(std::string_view name) {
  const auto it = splits.find(name);
  if (it == splits.end()) {
    throw Error(ErrorKind::usage, "split '" + std::string(name) + "' is not in the dataset '" +
                                      config.dataset_dir.string() + "'");
  }
  return it->second;
}

void Loader::Impl::on_consumed(Split& split, const detail::BatchSlot& slot) {
  if (mixture()) {
    on_consumed_mixture(split, slot);
    return;
  }
  split.consumed = slot.step + 1;
  if (*config.batch_sampling_mode != SamplingMode::epoch) {
    split.next_batch_in_epoch = split.consumed;
    return;
  }
  const EpisodeSampler& sampler = *split.sampler;
  const std::uint64_t kept = sampler.size();
  std::uint64_t batches = 0;
  bool last = false;
  if (packed_mode()) {
    // The batch says where the next one starts; it may have completed its epoch (and, on
    // a split of few rows, more than one).
    batches = static_cast<const PackedBatchSource&>(*split.source)
                  .batches_in_epoch_at(SplitPosition{slot.step, slot.epoch, slot.batch_in_epoch, slot.row_in_epoch});
    last = slot.next_epoch != slot.epoch;
    split.next_epoch = slot.next_epoch;
    split.next_row_in_epoch = slot.next_row_in_epoch;
    split.next_batch_in_epoch = last ? 0 : slot.batch_in_epoch + 1;
  } else {
    batches = split.source->batches_in_epoch(slot.epoch);
    last = slot.batch_in_epoch + 1 >= batches;
    split.next_epoch = last ? slot.epoch + 1 : slot.epoch;
    split.next_batch_in_epoch = last ? 0 : slot.batch_in_epoch + 1;
  }
  if (split.announced_epoch != slot.epoch) {
    split.announced_epoch = slot.epoch;
    const bool resumed = slot.batch_in_epoch != 0;
    log_line(LogLevel::debug,
             "[tokenfeed] split=" + split.name + " epoch=" + std::to_string(slot.epoch) +
                 (resumed ? " resumed_at_batch=" + std::to_string(slot.batch_in_epoch) : std::string()) + " " + unit() +
                 "=" + std::to_string(kept) + " batches=" + std::to_string(batches) +
                 " shuffle=" + bool_text(config.shuffle_for(split.name)) +
                 " drop_last=" + bool_text(config.drop_last_for(split.name)) +
                 (episode_mode() ? " pad_id=" + std::to_string(*config.pad_token_id) + " mask=" + bool_text(split.mask)
                                 : std::string(" document_aware=") + bool_text(config.document_aware)));
    const auto order = split.orders->get(slot.epoch);
    std::vector<std::uint64_t> first;
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(10, order->size()); ++i) {
      // With truncation=split the order holds piece numbers: their episodes' ids.
      first.push_back(EpisodeWindows::episode_of((*order)[i], sampler.pieces()));
    }
    AuditLog::Fields fields{{"split", split.name},
                            {"epoch", std::to_string(slot.epoch)},
                            {"seed", epoch_seed_text(config, slot.epoch)},
                            {"shuffle", bool_text(config.shuffle_for(split.name))},
                            {std::string("num_") + unit(), std::to_string(kept)},
                            {"batches", std::to_string(batches)},
                            {"rank", std::to_string(config.rank)},
                            {episode_mode() ? "first_episode_ids" : "first_window_ids", format_id_list(first)}};
    if (resumed) fields.emplace_back("resumed_at_batch", std::to_string(slot.batch_in_epoch));
    audit->write(resumed ? "epoch_resume" : "epoch_start", fields);
  }
  for (std::uint64_t epoch = slot.epoch; last && epoch < split.next_epoch; ++epoch) {
    const std::uint64_t seen = split.source->samples_in_epoch(epoch);
    audit->write("epoch_complete", {{"split", split.name},
                                    {"epoch", std::to_string(epoch)},
                                    {"seed_used", epoch_seed_text(config, epoch)},
                                    {std::string(unit()) + "_seen", std::to_string(seen)},
                                    {std::string(unit()) + "_skipped", std::to_string(kept - seen)},
                                    {"rank", std::to_string(config.rank)}});
  }
}

// Names each order field that differs between a state and this loader, and what to set.
std::string Loader::Impl::explain_mismatch(const ResumeState& state) const {
  if (state.order.empty()) {
    return "the state does not record its order fields (an older tokenfeed wrote it); the order depends on the "
           "dataset content, the global batch (batch_size x world_size), batch_sampling_mode, epoch_seed, "
           "epoch_shuffle, epoch_drop_last and episode_min_tokens (sft_packed and token_stream: block_size; "
           "sft_packed: pack_lookahead, truncation; sft_episode with truncation=split: block_size, truncation)";
  }
  std::string out;
  const auto add = [&](const std::string& text) { out += (out.empty() ? "" : "; ") + text; };
  std::set<std::string> keys;
  for (const auto& [key, value] : order_fields) keys.insert(key);
  for (const auto& [key, value] : state.order) keys.insert(key);
  for (const std::string& key : keys) {
    const auto theirs = state.order.find(key);
    const auto ours = order_fields.find(key);
    const std::string was = theirs == state.order.end() ? "(absent)" : theirs->second;
    const std::string is = ours == order_fields.end() ? "(absent)" : ours->second;
    if (was == is) continue;
    if (key == "global_batch_size") {
      std::string fix = "set batch_size x world_size = " + was;
      std::uint64_t global = 0;
      const auto [end, ec] = std::from_chars(was.data(), was.data() + was.size(), global);
      const auto world = static_cast<std::uint64_t>(config.world_size);
      if (ec == std::errc() && end == was.data() + was.size() && global > 0) {
        fix += global % world == 0
                   ? " (batch_size=" + std::to_string(global / world) + " at world_size=" + std::to_string(world) + ")"
                   : " (" + was + " is not a multiple of world_size=" + std::to_string(world) +
                         ": run with a world size that divides it)";
      }
      add("global_batch_size (batch_size x world_size) is " + was + " in the state but " + is + " here: " + fix);
    } else if (key.rfind("content.", 0) == 0 && was == "(absent)") {
      add("the state records no content hash of the '" + key.substr(8) +
          "' split (a tokenfeed before content hashing saved it): its order cannot be checked against this "
          "dataset's tokens; start the run afresh");
    } else if (key.rfind("content.", 0) == 0) {
      add("the content of the dataset's '" + key.substr(8) + "' split differs (content hash " + was +
          " in the state, " + is +
          " here) though its lengths may not: point dataset_dir at the dataset the state "
          "was saved with");
    } else if (key.rfind("source.", 0) == 0) {
      add("mixture " + key + " differs (its fingerprint " + was + " in the state, " + is +
          " here): its dataset or its order settings changed");
    } else if (key.rfind("data.", 0) == 0) {
      add("the dataset's '" + key.substr(5) + "' split differs (content fingerprint " + was + " in the state, " + is +
          " here): point dataset_dir at the dataset the state was saved with");
    } else {
      add(key + " is " + was + " in the state but " + is + " here: set " + key + "=" + was);
    }
  }
  return out.empty() ? "the fingerprint differs but no order field does" : out;
}

// The batch buffers every split's pool may grow to, computed before any is allocated, against
// max_memory_mb: a small config must not be able to ask for more memory than the machine has.
void Loader::Impl::check_memory_bound() const {
  const std::uint64_t limit_mb = effective_max_memory_mb(config);
  const auto held = static_cast<std::uint64_t>(config.max_held_batches);
  std::uint64_t total = 0;
  std::string parts;
  for (const auto& [name, split] : splits) {
    const detail::BatchShape shape = batch_shape(split);
    const std::uint64_t slot = detail::BatchPool::bytes_per_slot(shape);
    const std::uint64_t slots = pool_depths(shape).max + held;
    // Saturating: an absurd shape must not wrap around to a small figure.
    const std::uint64_t bytes = slot > UINT64_MAX / slots ? UINT64_MAX : slot * slots;
    total = bytes > UINT64_MAX - total ? UINT64_MAX : total + bytes;
    parts += (parts.empty() ? "" : ", ") + name + ": " + std::to_string(slots) + " batches of " +
             std::to_string(slot >> 20) + " MiB";
  }
  if (total / (1ULL << 20) > limit_mb) {
    throw Error(ErrorKind::config,
                "the batch buffers need " + std::to_string(total >> 20) + " MiB (" + parts + "; prefetch_depth plus " +
                    std::to_string(held) +
                    " batches the trainer may hold), more than max_memory_mb=" + std::to_string(limit_mb) +
                    (config.max_memory_mb == 0 ? " (auto: half of the physical memory)" : "") +
                    "; lower prefetch_depth, batch_size or block_size, or raise max_memory_mb");
  }
}

void Loader::Impl::stop_pipelines() {
  std::lock_guard lock(pipelines_mutex);
  stopped.store(true, std::memory_order_release);
  for (auto& [name, split] : splits) {
    if (split.pipeline) split.pipeline->stop();
  }
}

Loader::Loader(Config config) : impl_(std::make_unique<Impl>(std::move(config))) {}

Loader::~Loader() {
  if (!impl_) return;
  impl_->stop_pipelines();
  for (auto& [name, split] : impl_->splits) split.pipeline.reset();  // waits for the stages
}

Batch Loader::get_batch(std::string_view split_name) { return *next_batch(split_name, std::nullopt); }

std::optional<Batch> Loader::try_get_batch(std::string_view split, std::chrono::microseconds timeout) {
  return next_batch(split, std::chrono::steady_clock::now() + timeout);
}

std::optional<Batch> Loader::next_batch(std::string_view split_name,
                                        std::optional<std::chrono::steady_clock::time_point> deadline) {
  Impl& s = *impl_;
  Impl::Split& split = s.find(split_name);
  if (!split.unusable.empty()) throw Error(split.unusable_kind, split.unusable);
  const auto max_held = static_cast<std::size_t>(s.config.max_held_batches);
  if (split.pool && split.pool->held() >= max_held) {
    throw Error(ErrorKind::usage, "get_batch(\"" + split.name + "\"): the trainer already holds " +
                                      std::to_string(max_held) +
                                      " batches of this split (max_held_batches); release one (Batch::release or "
                                      "destroy it) first, or raise max_held_batches");
  }
  if (!split.pipeline) {
    std::lock_guard lock(s.pipelines_mutex);
    if (s.stopped.load(std::memory_order_acquire)) {
      throw Error(ErrorKind::usage, "get_batch(\"" + split.name + "\") after the loader was stopped");
    }
    const detail::BatchShape shape = s.batch_shape(split);
    split.source->seek(s.next_position(split));
    const auto threads = static_cast<std::size_t>(s.config.decode_threads);
    const SplitPipeline::Depths depth = s.pool_depths(shape);
    split.pool = std::make_shared<detail::BatchPool>(depth.initial + max_held, shape, split.name, depth.max + max_held);
    split.pipeline = std::make_unique<SplitPipeline>(
        *split.source, split.pool, SplitPipeline::Options{depth.initial, threads, split.consumed, depth.max});
  }
  double waited_us = 0;
  detail::BatchSlot* slot = split.pipeline->pop(waited_us, deadline);
  if (slot == nullptr) return std::nullopt;  // the deadline passed
  slot->wait_us = waited_us;
  Batch batch = split.pool->make_batch(slot);

  SplitStats& stats = split.stats;
  stats.prefetch_depth = split.pipeline->prefetch_depth();  // auto depth may have grown (and logged it)
  ++stats.batches;
  if (waited_us > 0) ++stats.waits;
  stats.total_wait_us += waited_us;
  stats.max_wait_us = std::max(stats.max_wait_us, waited_us);
  s.on_consumed(split, *slot);
  return batch;
}

std::string Loader::save_state() const {
  ResumeState state;
  state.fingerprint = impl_->fingerprint;
  state.order = impl_->order_fields;
  for (const auto& [name, split] : impl_->splits) state.splits[name] = impl_->next_position(split);
  return serialize_resume_state(state);
}

void Loader::load_state(std::string_view text) {
  Impl& s = *impl_;
  const ResumeState state = parse_resume_state(text);
  if (state.fingerprint != s.fingerprint) {
    throw Error(ErrorKind::state, "resume state belongs to another dataset or sampling config (state fingerprint " +
                                      state.fingerprint + ", this loader " + s.fingerprint +
                                      "): " + s.explain_mismatch(state));
  }
  // A Loader's state records every split; one without train would silently restart it.
  if (state.splits.find("train") == state.splits.end()) {
    throw Error(ErrorKind::state,
                "invalid resume state: it has no splits.train entry (save_state records every "
                "split, train always)");
  }
  // Where each split resumes. Epochs of equal length give the position from the step
  // alone; packed epochs differ in length, so their position is read from the state.
  std::map<std::string, SplitPosition, std::less<>> positions;
  for (const auto& [name, pos] : state.splits) {
    const auto it = s.splits.find(name);
    if (it == s.splits.end()) throw Error(ErrorKind::state, "resume state names split '" + name + "', which this dataset lacks");
    check_reachable(name, pos, s.config, s.packed_mode());
    const BatchSource& source = *it->second.source;
    SplitPosition resolved = pos;
    if (s.mixture()) {  // a mixture's batch k is a function of k alone, like random mode
      resolved.epoch = 0;
      resolved.batch_in_epoch = pos.step;
    } else if (!it->second.unusable.empty()) {
      if (pos.step != 0) throw Error(ErrorKind::state, "invalid resume state: splits." + name + ".step=" +
                                                           std::to_string(pos.step) + " but " + it->second.unusable);
      resolved = SplitPosition{};
    } else if (*s.config.batch_sampling_mode != SamplingMode::epoch) {
      resolved.epoch = 0;
      resolved.batch_in_epoch = pos.step;
    } else if (!s.packed_mode()) {
      const std::uint64_t per_epoch = source.batches_in_epoch(0);
      resolved.epoch = pos.step / per_epoch;
      resolved.batch_in_epoch = pos.step % per_epoch;
    } else {
      const std::uint64_t rows = static_cast<const PackedBatchSource&>(source).packing(pos.epoch)->rows();
      if (pos.row_in_epoch >= rows) {
        throw Error(ErrorKind::state, "invalid resume state: splits." + name +
                                          ".row_in_epoch=" + std::to_string(pos.row_in_epoch) + " but epoch " +
                                          std::to_string(pos.epoch) + " packs into " + std::to_string(rows) + " rows");
      }
    }
    if (!s.mixture() && *s.config.batch_sampling_mode == SamplingMode::epoch && s.config.shuffle_for(name) &&
        static_cast<std::uint64_t>(s.config.epoch_seed) + resolved.epoch > kMaxNumpySeed) {
      throw Error(ErrorKind::state,
                  "invalid resume state: splits." + name + " resumes in epoch " + std::to_string(resolved.epoch) +
                      ", and epoch_seed + epoch = " +
                      std::to_string(static_cast<std::uint64_t>(s.config.epoch_seed) + resolved.epoch) +
                      " exceeds numpy's seed range [0, 2^32-1]");
    }
    // Where the position follows from the step, the state's other fields must say the same:
    // a state that contradicts itself was not written by a Loader.
    if (s.mixture() || !s.packed_mode() || *s.config.batch_sampling_mode != SamplingMode::epoch) {
      if (pos.epoch != resolved.epoch || pos.batch_in_epoch != resolved.batch_in_epoch || pos.row_in_epoch != 0) {
        throw Error(ErrorKind::state,
                    "invalid resume state: splits." + name + " has epoch=" + std::to_string(pos.epoch) +
                        " batch_in_epoch=" + std::to_string(pos.batch_in_epoch) +
                        " row_in_epoch=" + std::to_string(pos.row_in_epoch) +
                        ", but its step=" + std::to_string(pos.step) + " is epoch " + std::to_string(resolved.epoch) +
                        ", batch_in_epoch " + std::to_string(resolved.batch_in_epoch) + ", row_in_epoch 0");
      }
      resolved.row_in_epoch = 0;
    }
    positions[name] = resolved;
  }
  std::lock_guard lock(s.pipelines_mutex);
  for (auto& [name, split] : s.splits) {
    split.pipeline.reset();  // stops and waits; restarted at the restored step on next get_batch
    split.pool.reset();      // batches still held keep their own reference
    const auto it = positions.find(name);
    const SplitPosition pos = it == positions.end() ? SplitPosition{} : it->second;
    split.consumed = pos.step;
    split.next_epoch = pos.epoch;
    split.next_batch_in_epoch = pos.batch_in_epoch;
    split.next_row_in_epoch = pos.row_in_epoch;
    split.announced_epoch.reset();
    std::fill(split.source_announced.begin(), split.source_announced.end(), std::nullopt);
  }
}

void Loader::stop() noexcept { impl_->stop_pipelines(); }

const Config& Loader::config() const noexcept { return impl_->config; }

bool Loader::has_split(std::string_view split) const noexcept { return impl_->splits.find(split) != impl_->splits.end(); }

SplitInfo Loader::split_info(std::string_view name) const {
  const Impl::Split& split = impl_->find(name);
  SplitInfo info;
  info.name = split.name;
  if (impl_->mixture()) {
    // The sources' totals; a mixture has no epochs of its own.
    for (const auto& member : impl_->members) {
      const Impl::Split& part = member->find(name);
      if (part.episodes) {
        info.episodes += part.episodes->num_episodes();
        info.kept_episodes += part.sampler->kept_size();
        info.tokens += part.episodes->total_tokens();
        info.shards += part.episodes->shards().size();
      } else {
        info.windows += part.sampler->size();
        info.tokens += part.stream->total_tokens();
        info.shards += part.stream->files().size();
      }
    }
    info.mask = split.mask;
    return info;
  }
  if (split.episodes) {
    info.episodes = split.episodes->num_episodes();
    info.kept_episodes = split.sampler->kept_size();
    info.tokens = split.episodes->total_tokens();
    info.shards = split.episodes->shards().size();
  } else {
    info.windows = split.sampler->size();
    info.tokens = split.stream->total_tokens();
    info.shards = split.stream->files().size();
  }
  info.mask = split.mask;
  // Packed epochs differ in length: the figure is that of the epoch the next batch is in.
  info.batches_per_epoch =
      *impl_->config.batch_sampling_mode == SamplingMode::epoch ? impl_->batches_in_next_epoch(split) : 0;
  info.next_epoch = split.next_epoch;
  info.next_batch_in_epoch = split.next_batch_in_epoch;
  return info;
}

namespace {

DatasetVocabulary vocabulary_of(const DatasetMetadata& m) {
  return DatasetVocabulary{m.vocab_size, m.eot_token_id, m.eos_token_id, m.special_tokens};
}

}  // namespace

DatasetVocabulary Loader::vocabulary() const { return vocabulary_of(impl_->metadata); }

DatasetVocabulary read_dataset_vocabulary(const std::filesystem::path& dataset_dir) {
  return vocabulary_of(read_dataset_metadata(dataset_dir));
}

SplitStats Loader::split_stats(std::string_view name) const { return impl_->find(name).stats; }

std::string Loader::fingerprint() const { return impl_->fingerprint; }

// ---- Mixtures (Config::mixture) ----

namespace {

// The one-row shape a source's own loader would give its slots (see get_batch).
detail::BatchShape one_row_shape(const Config& c, bool mask) { return batch_shape_of(c, 1, mask); }

// The most epochs of one source a global batch may span. Each epoch passed is found (a
// packed source packs it) and written to the audit log, so a step spanning millions of
// epochs (a world_size of 2^40 over a small source) would run for hours and write
// gigabytes: refused at open, with the keys to change.
constexpr std::uint64_t kMaxEpochsPerStep = std::uint64_t{1} << 16;

void check_epochs_per_step(const MixtureBatchSource::Member& part, const std::string& source, const std::string& split,
                           std::uint64_t rows_per_step) {
  if (part.epochs == MixtureBatchSource::Member::Epochs::none) return;
  const std::uint64_t rows = part.source->batches_in_epoch(0);
  if (rows == 0 || rows_per_step / rows <= kMaxEpochsPerStep) return;
  throw Error(ErrorKind::config, "mixture source '" + source + "': one step of batch_size x world_size = " +
                                     std::to_string(rows_per_step) + " rows spans up to " +
                                     std::to_string(rows_per_step / rows) + " epochs of its split '" + split + "' (" +
                                     std::to_string(rows) + " rows in epoch 0), more than " +
                                     std::to_string(kMaxEpochsPerStep) + "; lower world_size or batch_size");
}

}  // namespace

Config Loader::Impl::member_config(const MixtureSource& source) const {
  Config c = config;
  c.mixture.clear();
  c.stages.clear();
  c.dataset_dir.clear();
  for (const auto& [key, value] : source.keys) set_config_value(c, key, value);
  // A source's row k is its batch k at batch_size 1 and world_size 1, read by the mixture's
  // pipeline: the source has no ranks, no audit log and no threads of its own.
  c.batch_size = 1;
  c.world_size = 1;
  c.rank = 0;
  c.epoch_drop_last = false;  // at one row per batch nothing is dropped anyway
  c.audit_log_dir.clear();
  c.decode_threads = 1;
  return c;
}

void Loader::Impl::open_mixture() {
  const bool packed = config.dataset_mode == DatasetMode::sft_packed;
  std::vector<std::string> names;
  for (const MixtureSource& source : config.mixture) {
    const std::string who = "mixture source '" + source.name + "'";
    try {
      members.push_back(std::make_unique<Impl>(member_config(source)));
    } catch (const Error& e) {
      throw Error(e.kind(), who + ": " + e.what());
    }
    const DatasetMode mode = members.back()->config.dataset_mode;
    if (packed != (mode == DatasetMode::sft_packed)) {
      throw Error(ErrorKind::config,
                  who + " has dataset_mode=" + to_string(mode) +
                      (packed ? "; with dataset_mode=sft_packed for the mixture every source must be an sft_packed "
                                "episode dataset (each packed row holds episodes of one source)"
                              : "; sft_packed is set for the whole mixture (dataset_mode=sft_packed in <training>), "
                                "not per source"));
    }
    names.push_back(source.name);
  }

  // Each stage's full weight list: the previous stage's with this stage's changes.
  std::vector<MixtureSchedule::StageSpec> specs;
  std::vector<std::string> weights;
  for (const MixtureSource& source : config.mixture) weights.push_back(source.weight);
  if (config.stages.empty()) specs.push_back({weights, std::nullopt});
  for (const MixtureStage& stage : config.stages) {
    for (const auto& [name, weight] : stage.weights) {
      weights[static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin())] = weight;
    }
    std::optional<std::uint64_t> until;
    if (stage.until_step) until = static_cast<std::uint64_t>(*stage.until_step);
    specs.push_back({weights, until});
  }
  const auto B = static_cast<std::uint64_t>(config.batch_size);
  const auto W = static_cast<std::uint64_t>(config.world_size);
  schedule = std::make_unique<MixtureSchedule>(names, std::move(specs), global_batch_size(config));

  for (const char* name : kSplitNames) {
    std::string lacking;
    for (std::size_t i = 0; i < members.size(); ++i) {
      if (members[i]->splits.count(name) == 0) lacking += (lacking.empty() ? "" : ", ") + names[i];
    }
    if (!lacking.empty()) {
      if (std::string_view(name) == "train") {
        throw Error(ErrorKind::io, "mixture source(s) " + lacking + " have no train split");
      }
      if (lacking.size() != 0 && members.size() > 1) {
        log_line(LogLevel::info,
                 "[tokenfeed] mixture: no split=" + std::string(name) + " (source(s) " + lacking + " lack it)");
      }
      continue;
    }
    auto [it, inserted] = splits.emplace(name, Split{});
    Split& split = it->second;
    split.name = name;
    std::vector<MixtureBatchSource::Member> parts;
    bool any_episode = false;
    bool any_document = false;
    for (const auto& member : members) {
      Split& own = member->splits.at(name);
      MixtureBatchSource::Member part;
      part.source = own.source.get();
      part.shape = one_row_shape(member->config, own.mask);
      part.epochs = *member->config.batch_sampling_mode != SamplingMode::epoch
                        ? MixtureBatchSource::Member::Epochs::none
                    : member->packed_mode() ? MixtureBatchSource::Member::Epochs::varying
                                            : MixtureBatchSource::Member::Epochs::equal;
      check_epochs_per_step(part, config.mixture[parts.size()].name, name, B * W);
      parts.push_back(part);
      any_episode = any_episode || (member->episode_mode() && !member->packed_mode());
      any_document = any_document || member->config.document_aware;
      split.mask = split.mask || own.mask;
    }
    detail::BatchShape& shape = split.mixture_shape;
    shape.rows = static_cast<std::size_t>(B);
    shape.cols = static_cast<std::size_t>(config.block_size);
    shape.with_mask = split.mask;
    shape.with_document_fields = any_document;
    shape.y_is_labels = !any_episode;  // episode rows keep their raw y next to the labels
    shape.contract_fields = true;
    shape.mask_is_weights = true;
    shape.packed = packed;
    shape.with_source_ids = true;
    auto source = std::make_unique<MixtureBatchSource>(
        std::move(parts), *schedule, shape, MixtureBatchSource::Options{B, W, static_cast<std::uint64_t>(config.rank)});
    split.mixture_source = source.get();
    split.source = std::move(source);
    split.source_announced.assign(members.size(), std::nullopt);
    split.stats.prefetch_depth = static_cast<std::uint64_t>(config.prefetch_depth);
    split.stats.decode_threads = static_cast<std::uint64_t>(config.decode_threads);
  }

  // As for one dataset: the global batch, never its split across ranks, so that a state
  // resumes at another world size; each field named, so that a mismatch says which.
  order_fields["global_batch_size"] = std::to_string(B * W);
  order_fields["block_size"] = std::to_string(config.block_size);
  order_fields["dataset_mode"] = to_string(config.dataset_mode);
  for (std::size_t i = 0; i < members.size(); ++i) order_fields["source." + names[i]] = members[i]->fingerprint;
  for (std::size_t st = 0; st < schedule->stages(); ++st) {
    std::string stage = std::to_string(schedule->stage_first_step(st)) + ":";
    for (const std::uint64_t w : schedule->stage_weights(st)) stage += " " + std::to_string(w);
    order_fields["stage." + std::to_string(st)] = stage;
  }
  Hasher h;
  h.add(std::string_view("tokenfeed-mixture-v2"));
  for (const auto& [key, value] : order_fields) {
    h.add(std::string_view(key));
    h.add(std::string_view(value));
  }
  fingerprint = hex64(h.digest());
  check_memory_bound();

  std::string line = "[tokenfeed] mixture sources=" + std::to_string(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    const Config& c = members[i]->config;
    line += " " + names[i] + "(weight=" + config.mixture[i].weight + " mode=" + to_string(c.dataset_mode) +
            " dir=" + c.dataset_dir.string() + ")";
  }
  line += " stages=" + std::to_string(schedule->stages());
  log_line(LogLevel::info, line);

  audit = std::make_unique<AuditLog>(config.audit_log_dir, static_cast<long>(config.rank));
  AuditLog::Fields fields;
  for (auto& [key, value] : config_entries(config)) fields.emplace_back(std::move(key), std::move(value));
  fields.emplace_back("dataset_fingerprint", fingerprint);
  for (std::size_t i = 0; i < members.size(); ++i) {
    const Impl& m = *members[i];
    fields.emplace_back("source_" + names[i] + "_dataset_dir", m.config.dataset_dir.string());
    fields.emplace_back("source_" + names[i] + "_mode", to_string(m.config.dataset_mode));
    fields.emplace_back("source_" + names[i] + "_fingerprint", m.fingerprint);
    fields.emplace_back("source_" + names[i] + "_" + (m.episode_mode() ? "kept_" : "sampled_") + m.unit(),
                        std::to_string(m.splits.at("train").sampler->kept_size()));
  }
  audit->write("dataset_load", fields);
}

void Loader::Impl::on_consumed_mixture(Split& split, const detail::BatchSlot& slot) {
  const std::uint64_t step = slot.step;
  split.consumed = step + 1;
  split.next_epoch = 0;  // a mixture's position is its step alone
  split.next_batch_in_epoch = split.consumed;
  const auto rank = std::to_string(config.rank);
  const std::size_t stage = schedule->stage_of_step(step);
  if (schedule->stage_first_step(stage) == step) {
    std::string weights;
    for (std::size_t i = 0; i < members.size(); ++i) {
      weights += (weights.empty() ? "" : ",") + config.mixture[i].name + "=" + schedule->stage_weight_texts(stage)[i];
    }
    log_line(LogLevel::info, "[tokenfeed] split=" + split.name + " stage=" + std::to_string(stage) +
                                 " step=" + std::to_string(step) + " weights=" + weights);
    audit->write("stage_start", {{"split", split.name},
                                 {"stage", std::to_string(stage)},
                                 {"step", std::to_string(step)},
                                 {"weights", weights},
                                 {"rank", rank}});
  }
  // Each source's epochs that the global batch `step` opened or closed (every rank writes
  // the same events: they follow from the step alone).
  const std::uint64_t per_step = global_batch_size(config);
  const MixtureBatchSource& source = *split.mixture_source;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (!source.has_epochs(i)) continue;
    const auto index = static_cast<std::uint32_t>(i);
    const std::uint64_t before =
        schedule->rows_before(index, checked_product(step, per_step, "step x batch_size x world_size"));
    const std::uint64_t after =
        schedule->rows_before(index, checked_product(step + 1, per_step, "step x batch_size x world_size"));
    if (after == before) continue;
    const Impl& m = *members[i];
    const std::string& name = config.mixture[i].name;
    const std::uint64_t last = source.epoch_of(i, after - 1);
    for (std::uint64_t e = source.epoch_of(i, before); e <= last; ++e) {
      const std::uint64_t first = source.epoch_first_row(i, e);
      const std::uint64_t end = source.epoch_first_row(i, e + 1);
      const auto seed = epoch_seed_text(m.config, e);
      if (split.source_announced[i] != e) {
        split.source_announced[i] = e;
        const bool resumed = first < before;
        AuditLog::Fields fields{{"split", split.name},
                                {"source", name},
                                {"epoch", std::to_string(e)},
                                {"seed", seed},
                                {"rows", std::to_string(end - first)},
                                {"rank", rank}};
        if (resumed) fields.emplace_back("resumed_at_row", std::to_string(before - first));
        audit->write(resumed ? "epoch_resume" : "epoch_start", fields);
        log_line(LogLevel::info, "[tokenfeed] split=" + split.name + " source=" + name + " epoch=" + std::to_string(e) +
                                     (resumed ? " resumed_at_row=" + std::to_string(before - first) : std::string()) +
                                     " rows=" + std::to_string(end - first));
      }
      if (end <= after) {
        audit->write("epoch_complete", {{"split", split.name},
                                        {"source", name},
                                        {"epoch", std::to_string(e)},
                                        {"seed_used", seed},
                                        {"rows_seen", std::to_string(end - first)},
                                        {"rank", rank}});
      }
    }
  }
}

std::vector<std::string> Loader::source_names() const {
  std::vector<std::string> names;
  for (const MixtureSource& source : impl_->config.mixture) names.push_back(source.name);
  return names;
}

std::optional<std::uint64_t> Loader::source_epoch_after(std::string_view split_name, std::size_t source,
                                                        std::uint64_t steps) const {
  const Impl& s = *impl_;
  if (!s.mixture()) throw Error(ErrorKind::usage, "source_epoch_after: the loader reads one dataset, not a mixture");
  const Impl::Split& split = s.find(split_name);
  if (source >= s.members.size()) {
    throw Error(ErrorKind::usage, "source_epoch_after: source index " + std::to_string(source) +
                                      " but the mixture has " + std::to_string(s.members.size()) + " sources");
  }
  if (!split.mixture_source->has_epochs(source)) return std::nullopt;
  const std::uint64_t rows =
      s.schedule->rows_before(static_cast<std::uint32_t>(source),
                              checked_product(steps, global_batch_size(s.config), "steps x batch_size x world_size"));
  return split.mixture_source->epoch_of(source, rows);
}

}  // namespace tokenfeed
