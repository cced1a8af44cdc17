#include "tokenfeed/loader.hpp"

#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "audit_log.hpp"
#include "batch_pool.hpp"
#include "dataset_metadata.hpp"
#include "episode_batch_source.hpp"
#include "episode_dataset.hpp"
#include "episode_sampler.hpp"
#include "episode_window.hpp"
#include "packed_batch_source.hpp"
#include "hash.hpp"
#include "resume_state.hpp"
#include "split_pipeline.hpp"
#include "token_stream.hpp"
#include "token_stream_batch_source.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSplitNames[] = {"train", "val"};

std::string hex64(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));
  return text;
}

const char* bool_text(bool b) { return b ? "true" : "false"; }

// Resolves dataset_mode for an absent key from what train/ holds.
DatasetMode detect_mode(const fs::path& dataset_dir) {
  const fs::path train = dataset_dir / "train";
  if (EpisodeSplit::looks_like_episode_split(train)) return DatasetMode::sft_episode;
  if (TokenStreamSplit::has_split(dataset_dir, "train")) return DatasetMode::token_stream;
  throw Error(ErrorKind::io, "cannot detect dataset_mode in '" + dataset_dir.string() +
                                 "': train/ is not an episode-indexed split (episodes.idx) and there is no "
                                 "token stream (train.bin, or *.bin / *.npy files in train/)");
}

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
  const std::uint64_t rows_per_step = static_cast<std::uint64_t>(config.batch_size) *
                                      static_cast<std::uint64_t>(config.world_size);
  if (rows_per_step != 0 && pos.step > (std::uint64_t{1} << 62) / rows_per_step) {
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

}  // namespace

struct Loader::Impl {
  struct Split {
    std::string name;
    std::optional<EpisodeSplit> episodes;    // sft_episode
    std::optional<TokenStreamSplit> stream;  // token_stream
    std::unique_ptr<EpisodeWindows> windows;  // SFT modes: what a row keeps of an episode
    std::unique_ptr<EpisodeSampler> sampler;  // over kept episode ids, or window ids
    std::unique_ptr<BatchSource> source;
    std::shared_ptr<detail::BatchPool> pool;
    std::unique_ptr<SplitPipeline> pipeline;  // created on first get_batch
    std::uint64_t consumed = 0;               // batches the trainer took: the next step
    std::uint64_t next_epoch = 0;             // the next batch's place in its epoch
    std::uint64_t next_batch_in_epoch = 0;
    // The epoch whose start (or resumption) was last logged; a run that starts or resumes
    // mid-epoch logs epoch_resume for it, so that every epoch_complete has an opening line.
    std::optional<std::uint64_t> announced_epoch;
    bool mask = false;
    std::uint64_t fingerprint = 0;
    SplitStats stats;
    // Why this split cannot form one batch in epoch mode (val only; train refuses to open):
    // get_batch on it throws Error(config) with this text. Empty when usable.
    std::string unusable;
  };

  Config config;
  DatasetMetadata metadata;
  std::map<std::string, Split, std::less<>> splits;
  std::string fingerprint;
  std::unique_ptr<AuditLog> audit;

  std::mutex pipelines_mutex;  // guards pipeline creation against a concurrent stop()
  std::atomic<bool> stopped{false};

  explicit Impl(Config c);
  // The SFT modes read episode-indexed datasets.
  bool episode_mode() const noexcept { return config.dataset_mode != DatasetMode::token_stream; }
  bool packed_mode() const noexcept { return config.dataset_mode == DatasetMode::sft_packed; }
  // What a sampled id is called in messages: an episode or a window.
  const char* unit() const noexcept { return episode_mode() ? "episodes" : "windows"; }
  EpisodeSampler::Settings sampler_settings(const std::string& split) const;
  void open_episode_split(const std::string& name, const fs::path& dir);
  void open_stream_split(const std::string& name);
  Split& find(std::string_view name);
  const Split& find(std::string_view name) const { return const_cast<Impl*>(this)->find(name); }
  void on_consumed(Split& split, const detail::BatchSlot& slot);
  void check_forms_a_batch(Split& split);
  detail::BatchShape batch_shape(const Split& split) const;
  // prefetch_depth 0 (auto): a start and a cap under prefetch_memory_mb.
  SplitPipeline::Depths pool_depths(const detail::BatchShape& shape) const;
  void check_memory_bound() const;
  void stop_pipelines();
};

Loader::Impl::Impl(Config c) : config(std::move(c)) {
  validate_config(config);
  std::error_code ec;
  if (!fs::is_directory(config.dataset_dir, ec)) {
    throw Error(ErrorKind::io, "dataset_dir '" + config.dataset_dir.string() + "' does not exist or is not a directory");
  }
  metadata = read_dataset_metadata(config.dataset_dir);

  if (config.dataset_mode == DatasetMode::auto_detect) config.dataset_mode = detect_mode(config.dataset_dir);
  if (!config.batch_sampling_mode) {
    config.batch_sampling_mode = episode_mode() ? SamplingMode::epoch : SamplingMode::random;
  }
  if (packed_mode() && *config.batch_sampling_mode != SamplingMode::epoch) {
    throw Error(ErrorKind::config, "dataset_mode=sft_packed packs each epoch's episode order into rows; it needs "
                                   "batch_sampling_mode=epoch, not random");
  }
  // The dataset's own record of its dtypes comes first; a config that names another one is
  // describing some other dataset, so the disagreement is an error rather than a silent
  // reinterpretation of the bytes.
  const auto metadata_file = (config.dataset_dir / "dataset_metadata.json").string();
  if (config.token_dtype && metadata.token_dtype && *config.token_dtype != *metadata.token_dtype) {
    throw Error(ErrorKind::config, "config key 'token_dtype' is " + std::string(to_string(*config.token_dtype)) +
                                       " but '" + metadata_file + "' says " + to_string(*metadata.token_dtype) +
                                       "; remove the key or fix the metadata");
  }
  if (config.mask_dtype && metadata.mask_dtype && *config.mask_dtype != *metadata.mask_dtype) {
    throw Error(ErrorKind::config, "config key 'mask_dtype' is " + std::string(to_string(*config.mask_dtype)) +
                                       " but '" + metadata_file + "' says " + to_string(*metadata.mask_dtype) +
                                       "; remove the key or fix the metadata");
  }
  if (metadata.token_dtype) config.token_dtype = metadata.token_dtype;  // else the config's, else inferred per split
  if (metadata.mask_dtype) config.mask_dtype = metadata.mask_dtype;
  if (episode_mode() && !config.pad_token_id) {
    config.pad_token_id = metadata.eot_token_id ? metadata.eot_token_id : metadata.eos_token_id;
    if (!config.pad_token_id) {
      throw Error(ErrorKind::config,
                  "config key 'pad_token_id' is not set and '" + (config.dataset_dir / "dataset_metadata.json").string() +
                      "' gives neither eot_token_id nor eos_token_id; set pad_token_id in the config");
    }
  }
  if (config.document_aware) {
    if (episode_mode()) {
      throw Error(ErrorKind::config, std::string("config key 'document_aware' applies to dataset_mode=token_stream, not ") +
                                         to_string(config.dataset_mode));
    }
    if (!config.eos_token_id) config.eos_token_id = metadata.eos_token_id ? metadata.eos_token_id : metadata.eot_token_id;
    if (!config.eos_token_id) {
      throw Error(ErrorKind::config,
                  "document_aware=true needs an end-of-text id: set eos_token_id in the config or in '" +
                      (config.dataset_dir / "dataset_metadata.json").string() + "'");
    }
  }
  if (config.use_loss_mask && !episode_mode()) {
    log_line(LogLevel::warning, "[tokenfeed] warning: use_loss_mask applies to episode datasets; token_stream "
                                "batches have no mask");
  }
  if (config.decode_threads == 0) {
    // One hardware thread is the trainer's; TBB's workers get the rest.
    config.decode_threads =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::thread::hardware_concurrency()) - 1);
  }

  if (episode_mode()) {
    const fs::path train_dir = config.dataset_dir / "train";
    if (!fs::exists(train_dir, ec)) throw Error(ErrorKind::io, "split directory '" + train_dir.string() + "' does not exist");
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
    if (config.use_loss_mask) {
      std::string without;
      for (const auto& [name, split] : splits) {
        if (!split.episodes->mask_files_present()) without += (without.empty() ? "" : ", ") + name;
      }
      if (!without.empty()) {
        log_line(LogLevel::warning, "[tokenfeed] warning: use_loss_mask=true but the dataset has no mask.bin (split " +
                                        without + "); returning x and y only");
      }
    }
  } else {
    for (const char* name : kSplitNames) {
      if (std::string_view(name) == "train" || TokenStreamSplit::has_split(config.dataset_dir, name)) {
        open_stream_split(name);
      }
    }
    if (!config.token_dtype) config.token_dtype = splits.at("train").stream->common_dtype();
  }

  Hasher h;
  h.add(std::string_view("tokenfeed-order-v1"));
  h.add(std::string_view(to_string(config.dataset_mode)));
  for (const auto& [name, split] : splits) {
    h.add(std::string_view(name));
    h.add(split.fingerprint);
  }
  h.add(std::string_view(to_string(*config.batch_sampling_mode)));
  h.add(static_cast<std::uint64_t>(config.epoch_shuffle));
  h.add(static_cast<std::uint64_t>(config.epoch_drop_last));
  h.add(static_cast<std::uint64_t>(config.epoch_seed));
  h.add(static_cast<std::uint64_t>(config.batch_size));
  h.add(static_cast<std::uint64_t>(config.world_size));
  if (episode_mode()) {
    h.add(static_cast<std::uint64_t>(config.episode_min_tokens));
  }
  if (packed_mode()) {
    // Rows depend on how episodes are cut and on the row length.
    h.add(static_cast<std::uint64_t>(config.block_size));
    h.add(static_cast<std::uint64_t>(config.pack_lookahead));
    h.add(std::string_view(to_string(config.truncation)));
  } else if (!episode_mode()) {
    h.add(static_cast<std::uint64_t>(config.block_size));  // windows are carved at block_size + 1
  }
  fingerprint = hex64(h.digest());
  check_memory_bound();

  audit = std::make_unique<AuditLog>(config.audit_log_dir, static_cast<long>(config.rank));
  AuditLog::Fields fields;
  for (auto& [key, value] : config_entries(config)) fields.emplace_back(std::move(key), std::move(value));
  fields.emplace_back("dataset_fingerprint", fingerprint);
  for (const auto& [name, split] : splits) {
    if (split.episodes) fields.emplace_back("num_" + name + "_episodes", std::to_string(split.episodes->num_episodes()));
    fields.emplace_back(std::string(episode_mode() ? "kept_" : "sampled_") + name + "_" + unit(),
                        std::to_string(split.sampler->size()));
  }
  audit->write("dataset_load", fields);
}

EpisodeSampler::Settings Loader::Impl::sampler_settings(const std::string& split) const {
  EpisodeSampler::Settings settings;
  settings.mode = *config.batch_sampling_mode;
  settings.shuffle = config.epoch_shuffle;
  settings.drop_last = config.epoch_drop_last;
  settings.seed = static_cast<std::uint32_t>(config.epoch_seed);
  settings.batch_size = static_cast<std::uint64_t>(config.batch_size);
  settings.world_size = static_cast<std::uint64_t>(config.world_size);
  settings.rank = static_cast<std::uint64_t>(config.rank);
  settings.split = split;
  return settings;
}

void Loader::Impl::open_episode_split(const std::string& name, const fs::path& dir) {
  EpisodeSplitOptions options;
  options.token_dtype = config.token_dtype;
  options.mask_dtype = config.mask_dtype;
  options.want_mask = config.use_loss_mask;

  auto [it, inserted] = splits.emplace(name, Split{});
  Split& split = it->second;  // the map node keeps its address: the source may refer to it
  split.name = name;
  split.episodes.emplace(EpisodeSplit::open(dir, options));
  const EpisodeSplit& data = *split.episodes;
  std::vector<std::uint64_t> kept = kept_episodes(data, static_cast<std::uint64_t>(config.episode_min_tokens));
  if (kept.empty()) {
    throw Error(ErrorKind::format, "split '" + dir.string() + "' has no episode left after filtering (" +
                                       std::to_string(data.num_episodes()) +
                                       " episodes, none with length >= episode_min_tokens=" +
                                       std::to_string(config.episode_min_tokens) + ")");
  }
  split.mask = data.has_mask();
  split.fingerprint = data.fingerprint();
  const auto block = static_cast<std::size_t>(config.block_size);
  split.windows = std::make_unique<EpisodeWindows>(data, block + 1, config.truncation, metadata.special_tokens);
  if (packed_mode()) {
    // The sampler only orders the episodes; rows, not episodes, make up a batch.
    EpisodeSampler::Settings order = sampler_settings(name);
    order.batch_size = 1;
    order.world_size = 1;
    order.rank = 0;
    order.drop_last = false;
    split.sampler = std::make_unique<EpisodeSampler>(std::move(kept), order);
    PackedBatchSource::Options packing;
    packing.block_size = block;
    packing.batch_size = static_cast<std::uint64_t>(config.batch_size);
    packing.world_size = static_cast<std::uint64_t>(config.world_size);
    packing.rank = static_cast<std::uint64_t>(config.rank);
    packing.drop_last = config.epoch_drop_last;
    packing.lookahead = static_cast<std::size_t>(config.pack_lookahead);
    packing.pad_token_id = *config.pad_token_id;
    packing.ignore_index = config.ignore_index;
    packing.with_mask = split.mask;
    split.source = std::make_unique<PackedBatchSource>(data, *split.windows, *split.sampler, packing);
  } else {
    split.sampler = std::make_unique<EpisodeSampler>(std::move(kept), sampler_settings(name));
    split.source = std::make_unique<EpisodeBatchSource>(
        data, *split.sampler, *split.windows,
        EpisodeBatchSource::Options{*config.pad_token_id, block, split.mask, config.ignore_index,
                                    config.contract_fields});
  }
  check_forms_a_batch(split);
  split.stats.prefetch_depth = static_cast<std::uint64_t>(config.prefetch_depth);
  split.stats.decode_threads = static_cast<std::uint64_t>(config.decode_threads);
  log_line(LogLevel::info, "[tokenfeed] split=" + name + " episodes=" + std::to_string(data.num_episodes()) +
                               " kept=" + std::to_string(split.sampler->size()) +
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
    throw Error(ErrorKind::format, "split '" + name + "' of '" + config.dataset_dir.string() + "' has " +
                                       std::to_string(data.total_tokens()) +
                                       " tokens but no file holds one window of block_size + 1 = " +
                                       std::to_string(block + 1) + " tokens");
  }
  split.fingerprint = data.fingerprint();
  split.sampler = std::make_unique<EpisodeSampler>(EpisodeSampler::IdRange{samples}, sampler_settings(name));
  TokenStreamBatchSource::Options options;
  options.block_size = block;
  options.mode = *config.batch_sampling_mode;
  if (config.document_aware) options.eos_token_id = config.eos_token_id;
  options.ignore_index = config.ignore_index;
  options.contract_fields = config.contract_fields;
  split.source = std::make_unique<TokenStreamBatchSource>(data, *split.sampler, options);
  check_forms_a_batch(split);
  split.stats.prefetch_depth = static_cast<std::uint64_t>(config.prefetch_depth);
  split.stats.decode_threads = static_cast<std::uint64_t>(config.decode_threads);
  const auto dtype = data.common_dtype();
  log_line(LogLevel::info, "[tokenfeed] split=" + name + " tokens=" + std::to_string(data.total_tokens()) +
                               " files=" + std::to_string(data.files().size()) +
                               " dtype=" + (dtype ? to_string(*dtype) : "mixed") + " " +
                               (*config.batch_sampling_mode == SamplingMode::epoch ? "windows=" : "window_starts=") +
                               std::to_string(samples) + " document_aware=" + bool_text(config.document_aware));
}

// In epoch mode with epoch_drop_last, a split smaller than one global batch yields no
// batch. For train that is an error at open; a small val split only fails when it is used,
// so that a trainer that never evaluates (or evaluates elsewhere) is not stopped by it.
void Loader::Impl::check_forms_a_batch(Split& split) {
  if (*config.batch_sampling_mode != SamplingMode::epoch || split.source->batches_in_epoch(0) > 0) return;
  const std::uint64_t global = static_cast<std::uint64_t>(config.batch_size * config.world_size);
  std::string what;
  if (packed_mode()) {
    what = std::to_string(split.sampler->size()) + " kept episodes that pack into " +
           std::to_string(static_cast<const PackedBatchSource&>(*split.source).packing(0)->rows()) + " rows";
  } else {
    what = std::to_string(split.sampler->size()) + (episode_mode() ? " kept episodes" : " windows of block_size + 1");
  }
  split.unusable = "split '" + split.name + "' of '" + config.dataset_dir.string() + "' has " + what +
                   ", fewer than one global batch (batch_size x world_size = " + std::to_string(global) +
                   ") with epoch_drop_last=true; set epoch_drop_last=false or a smaller batch_size";
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
  split.consumed = slot.step + 1;
  if (*config.batch_sampling_mode != SamplingMode::epoch) {
    split.next_batch_in_epoch = split.consumed;
    return;
  }
  const EpisodeSampler& sampler = *split.sampler;
  const std::uint64_t kept = sampler.size();
  const std::uint64_t batches = split.source->batches_in_epoch(slot.epoch);
  const bool last = slot.batch_in_epoch + 1 >= batches;
  split.next_epoch = last ? slot.epoch + 1 : slot.epoch;
  split.next_batch_in_epoch = last ? 0 : slot.batch_in_epoch + 1;
  if (split.announced_epoch != slot.epoch) {
    split.announced_epoch = slot.epoch;
    const bool resumed = slot.batch_in_epoch != 0;
    log_line(LogLevel::info, "[tokenfeed] split=" + split.name + " epoch=" + std::to_string(slot.epoch) +
                                 (resumed ? " resumed_at_batch=" + std::to_string(slot.batch_in_epoch) : std::string()) +
                                 " " + unit() + "=" + std::to_string(kept) +
                                 " batches=" + std::to_string(batches) +
                                 " shuffle=" + bool_text(config.epoch_shuffle) +
                                 " drop_last=" + bool_text(config.epoch_drop_last) +
                                 (episode_mode() ? " pad_id=" + std::to_string(*config.pad_token_id) +
                                                       " mask=" + bool_text(split.mask)
                                                 : std::string(" document_aware=") + bool_text(config.document_aware)));
    const auto order = sampler.epoch_order(slot.epoch);
    const std::vector<std::uint64_t> first(order->begin(),
                                           order->begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(10, order->size())));
    AuditLog::Fields fields{{"split", split.name},
                            {"epoch", std::to_string(slot.epoch)},
                            {"seed", epoch_seed_text(config, slot.epoch)},
                            {"shuffle", bool_text(config.epoch_shuffle)},
                            {std::string("num_") + unit(), std::to_string(kept)},
                            {"batches", std::to_string(batches)},
                            {"rank", std::to_string(config.rank)},
                            {episode_mode() ? "first_episode_ids" : "first_window_ids", format_id_list(first)}};
    if (resumed) fields.emplace_back("resumed_at_batch", std::to_string(slot.batch_in_epoch));
    audit->write(resumed ? "epoch_resume" : "epoch_start", fields);
  }
  if (last) {
    const std::uint64_t seen = split.source->samples_in_epoch(slot.epoch);
    audit->write("epoch_complete", {{"split", split.name},
                                    {"epoch", std::to_string(slot.epoch)},
                                    {"seed_used", epoch_seed_text(config, slot.epoch)},
                                    {std::string(unit()) + "_seen", std::to_string(seen)},
                                    {std::string(unit()) + "_skipped", std::to_string(kept - seen)},
                                    {"rank", std::to_string(config.rank)}});
  }
}

detail::BatchShape Loader::Impl::batch_shape(const Split& split) const {
  detail::BatchShape shape;
  shape.rows = static_cast<std::size_t>(config.batch_size);
  shape.cols = static_cast<std::size_t>(config.block_size);
  shape.with_mask = split.mask;
  shape.with_document_fields = config.document_aware;
  shape.y_is_labels = !episode_mode() || packed_mode();
  shape.contract_fields = config.contract_fields;
  // sft_episode's mask equals its token weights, so with both only the weights are written.
  shape.mask_is_weights = packed_mode() || (episode_mode() && config.contract_fields);
  shape.packed = packed_mode();
  return shape;
}

SplitPipeline::Depths Loader::Impl::pool_depths(const detail::BatchShape& shape) const {
  return SplitPipeline::plan_depths(config.prefetch_depth, config.prefetch_memory_mb,
                                    detail::BatchPool::bytes_per_slot(shape), static_cast<std::size_t>(config.decode_threads),
                                    kMaxHeldBatches);
}

// The batch buffers every split's pool may grow to, computed before any is allocated, against
// max_memory_mb: a small config must not be able to ask for more memory than the machine has.
void Loader::Impl::check_memory_bound() const {
  const std::uint64_t limit_mb = effective_max_memory_mb(config);
  std::uint64_t total = 0;
  std::string parts;
  for (const auto& [name, split] : splits) {
    const detail::BatchShape shape = batch_shape(split);
    const std::uint64_t slot = detail::BatchPool::bytes_per_slot(shape);
    const std::uint64_t slots = pool_depths(shape).max + kMaxHeldBatches;
    // Saturating: an absurd shape must not wrap around to a small figure.
    const std::uint64_t bytes = slot > UINT64_MAX / slots ? UINT64_MAX : slot * slots;
    total = bytes > UINT64_MAX - total ? UINT64_MAX : total + bytes;
    parts += (parts.empty() ? "" : ", ") + name + ": " + std::to_string(slots) + " batches of " +
             std::to_string(slot >> 20) + " MiB";
  }
  if (total / (1ULL << 20) > limit_mb) {
    throw Error(ErrorKind::config,
                "the batch buffers need " + std::to_string(total >> 20) + " MiB (" + parts +
                    "; prefetch_depth plus " + std::to_string(kMaxHeldBatches) +
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

Batch Loader::get_batch(std::string_view split_name) {
  Impl& s = *impl_;
  Impl::Split& split = s.find(split_name);
  if (!split.unusable.empty()) throw Error(ErrorKind::config, split.unusable);
  if (split.pool && split.pool->held() >= kMaxHeldBatches) {
    throw Error(ErrorKind::usage, "get_batch(\"" + split.name + "\"): the trainer already holds " +
                                      std::to_string(kMaxHeldBatches) +
                                      " batches of this split; release one (Batch::release or destroy it) first");
  }
  if (!split.pipeline) {
    std::lock_guard lock(s.pipelines_mutex);
    if (s.stopped.load(std::memory_order_acquire)) {
      throw Error(ErrorKind::usage, "get_batch(\"" + split.name + "\") after the loader was stopped");
    }
    const detail::BatchShape shape = s.batch_shape(split);
    split.source->seek(split.consumed, split.next_epoch, split.next_batch_in_epoch);
    const auto threads = static_cast<std::size_t>(s.config.decode_threads);
    const SplitPipeline::Depths depth = s.pool_depths(shape);
    split.pool = std::make_shared<detail::BatchPool>(depth.initial + kMaxHeldBatches, shape, split.name,
                                                     depth.max + kMaxHeldBatches);
    split.pipeline = std::make_unique<SplitPipeline>(
        *split.source, split.pool, SplitPipeline::Options{depth.initial, threads, split.consumed, depth.max});
  }
  double waited_us = 0;
  detail::BatchSlot* slot = split.pipeline->pop(waited_us);
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
  for (const auto& [name, split] : impl_->splits) {
    SplitPosition pos;
    pos.step = split.consumed;
    pos.epoch = split.next_epoch;
    pos.batch_in_epoch = split.next_batch_in_epoch;
    state.splits[name] = pos;
  }
  return serialize_resume_state(state);
}

void Loader::load_state(std::string_view text) {
  Impl& s = *impl_;
  const ResumeState state = parse_resume_state(text);
  if (state.fingerprint != s.fingerprint) {
    throw Error(ErrorKind::state,
                "resume state belongs to another dataset or sampling config (state fingerprint " + state.fingerprint +
                    ", this loader " + s.fingerprint +
                    "); the order depends on the dataset content, batch_size, world_size, batch_sampling_mode, "
                    "epoch_seed, epoch_shuffle, epoch_drop_last and episode_min_tokens");
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
    if (*s.config.batch_sampling_mode != SamplingMode::epoch) {
      resolved.epoch = 0;
      resolved.batch_in_epoch = pos.step;
    } else if (!it->second.unusable.empty()) {
      if (pos.step != 0) throw Error(ErrorKind::state, "invalid resume state: splits." + name + ".step=" +
                                                           std::to_string(pos.step) + " but " + it->second.unusable);
      resolved = SplitPosition{};
    } else if (!s.packed_mode()) {
      const std::uint64_t per_epoch = source.batches_in_epoch(0);
      resolved.epoch = pos.step / per_epoch;
      resolved.batch_in_epoch = pos.step % per_epoch;
    } else if (pos.batch_in_epoch >= source.batches_in_epoch(pos.epoch)) {
      throw Error(ErrorKind::state, "invalid resume state: splits." + name + ".batch_in_epoch=" +
                                        std::to_string(pos.batch_in_epoch) + " but epoch " + std::to_string(pos.epoch) +
                                        " has " + std::to_string(source.batches_in_epoch(pos.epoch)) + " batches");
    }
    if (*s.config.batch_sampling_mode == SamplingMode::epoch && s.config.epoch_shuffle &&
        static_cast<std::uint64_t>(s.config.epoch_seed) + resolved.epoch > kMaxNumpySeed) {
      throw Error(ErrorKind::state, "invalid resume state: splits." + name + " resumes in epoch " +
                                        std::to_string(resolved.epoch) + ", and epoch_seed + epoch = " +
                                        std::to_string(static_cast<std::uint64_t>(s.config.epoch_seed) + resolved.epoch) +
                                        " exceeds numpy's seed range [0, 2^32-1]");
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
    split.announced_epoch.reset();
  }
}

void Loader::stop() noexcept { impl_->stop_pipelines(); }

const Config& Loader::config() const noexcept { return impl_->config; }

bool Loader::has_split(std::string_view split) const noexcept { return impl_->splits.find(split) != impl_->splits.end(); }

SplitInfo Loader::split_info(std::string_view name) const {
  const Impl::Split& split = impl_->find(name);
  SplitInfo info;
  info.name = split.name;
  if (split.episodes) {
    info.episodes = split.episodes->num_episodes();
    info.kept_episodes = split.sampler->size();
    info.tokens = split.episodes->total_tokens();
    info.shards = split.episodes->shards().size();
  } else {
    info.windows = split.sampler->size();
    info.tokens = split.stream->total_tokens();
    info.shards = split.stream->files().size();
  }
  info.mask = split.mask;
  // Packed epochs differ in length: the figure is that of the epoch the next batch is in.
  info.batches_per_epoch = *impl_->config.batch_sampling_mode == SamplingMode::epoch
                               ? split.source->batches_in_epoch(split.next_epoch)
                               : 0;
  return info;
}

SplitStats Loader::split_stats(std::string_view name) const { return impl_->find(name).stats; }

std::string Loader::fingerprint() const { return impl_->fingerprint; }

}  // namespace tokenfeed
