#include "splits/resolved_options.hpp"

#include "launch/cpu_share.hpp"

#include <algorithm>
#include <system_error>
#include <thread>
#include <utility>

#include "dataset/episode_dataset.hpp"
#include "dataset/token_stream.hpp"
#include "audit/audit_trail.hpp"
#include "launch/launcher_ranks.hpp"
#include "launch/parallel_layout.hpp"
#include "splits/shape_plan.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {

namespace fs = std::filesystem;

namespace {

// dataset_mode for an absent key: what train/ holds.
DatasetMode detect_mode(const fs::path& dataset_dir) {
  if (const auto layout = detect_split_layout(dataset_dir, "train")) return *layout;
  throw Error(ErrorKind::io, "cannot detect dataset_mode in '" + dataset_dir.string() +
                                 "': train/ is not an episode-indexed split (episodes.idx) and there is no "
                                 "token stream (train.bin, or *.bin / *.npy files in train/)");
}

}  // namespace

void check_dataset_dir(const Config& config) {
  std::error_code ec;
  if (!fs::is_directory(config.dataset_dir, ec)) {
    throw Error(ErrorKind::io,
                "dataset_dir '" + config.dataset_dir.string() + "' does not exist or is not a directory");
  }
}

std::optional<DatasetMode> detect_split_layout(const fs::path& dataset_dir, const std::string& split) {
  if (EpisodeSplit::looks_like_episode_split(dataset_dir / split)) return DatasetMode::sft_episode;
  if (TokenStreamSplit::has_split(dataset_dir, split)) return DatasetMode::token_stream;
  return std::nullopt;
}

std::optional<PadChoice> pad_from_metadata(const Config& config, const DatasetMetadata& metadata) {
  if (config.pad_token_id) return PadChoice{*config.pad_token_id, "config"};
  if (metadata.pad_token_id) return PadChoice{*metadata.pad_token_id, "metadata pad_token_id"};
  if (metadata.eot_token_id) return PadChoice{*metadata.eot_token_id, "metadata eot_token_id"};
  if (metadata.eos_token_id) return PadChoice{*metadata.eos_token_id, "metadata eos_token_id"};
  return std::nullopt;
}

std::optional<std::int64_t> end_of_text_id(std::optional<std::int64_t> given, const DatasetMetadata& metadata) {
  if (given) return given;
  return metadata.eos_token_id ? metadata.eos_token_id : metadata.eot_token_id;
}

namespace {

// rank and world_size from the launcher when they are not numbers; then the parallel
// layout, whose data-parallel coordinates the config holds from here on.
void settle_ranks(Config& config, ResolvedOptions& r) {
  const LauncherRanks ranks = resolve_ranks(config);
  config.rank = ranks.rank;
  config.world_size = ranks.world_size;
  r.rank_source = ranks.source;
  r.layout = resolve_parallel_layout(config);
  config.data_parallel_rank = r.layout.data_parallel_rank;
  config.data_parallel_size = r.layout.data_parallel_size;
  if (r.layout.context_parallel_rank >= 0) config.context_parallel_rank = r.layout.context_parallel_rank;
  global_batch_size(config);
  const std::uint64_t world = data_parallel_size(config);
  if (config.val_overrides.batch_size &&
      static_cast<std::uint64_t>(*config.val_overrides.batch_size) > kMaxGlobalBatch / world) {
    throw Error(ErrorKind::config, "config key 'val.batch_size' x the data-parallel size = " +
                                       std::to_string(*config.val_overrides.batch_size) + " x " +
                                       std::to_string(world) + " exceed 2^40 rows per step");
  }
}

}  // namespace

void settle_decode_threads(Config& config, ResolvedOptions& r) {
  // The local ranks are read even when nothing below uses them, so that a bad variable is
  // an error at open, not a silently undivided memory budget.
  const LocalRanks local_ranks = resolve_local_ranks();
  // This process's share of the CPUs it may use; one of them is the trainer's.
  const DecodeThreadsDefault threads = default_decode_threads(read_cpu_budget(local_ranks));
  if (config.decode_threads == 0) {
    config.decode_threads = threads.threads;
    r.decode_threads_source = threads.source;
  } else {
    r.decode_threads_source = "config";
  }
  r.trainer_may_spin = threads.share > config.decode_threads;
}

std::uint64_t global_batch_size(const Config& config) {
  const auto batch = static_cast<std::uint64_t>(config.batch_size);
  const std::uint64_t world = data_parallel_size(config);
  if (world > kMaxGlobalBatch || batch * world > kMaxGlobalBatch) {  // batch <= 2^24: no wrap
    throw Error(ErrorKind::config, "config key 'batch_size' x the data-parallel size = " + std::to_string(batch) +
                                       " x " + std::to_string(world) +
                                       " exceed 2^40 rows per step (the loader's row "
                                       "counter must hold the rows of every step of a run); lower world_size");
  }
  return batch * world;
}

ResolvedOptions resolve_prompt_options(Config config, std::size_t max_tokens) {
  if (config.batch_size <= 0) config.batch_size = 1;
  if (config.block_size <= 0) config.block_size = static_cast<std::int64_t>(max_tokens);
  validate_config(config);  // a shape_schedule is the GroupBatcher's (GroupBatcherOptions), not the prompts'
  check_dataset_dir(config);
  ResolvedOptions r;
  settle_ranks(config, r);
  r.metadata = read_dataset_metadata(config.dataset_dir);
  r.config = std::move(config);
  Config& c = r.config;
  c.token_dtype = settle_dtype(c.token_dtype, r.metadata.token_dtype, config_key("token_dtype"), r.metadata_file());
  if (const std::optional<PadChoice> pad = pad_from_metadata(c, r.metadata)) {
    c.pad_token_id = pad->id;
    r.pad_source = pad->source;
  }
  if (!c.batch_sampling_mode) c.batch_sampling_mode = SamplingMode::epoch;
  return r;
}

bool pads_sequences_for_context_parallel(const Config& c) noexcept {
  return c.context_parallel_size > 1 && (c.dataset_mode == DatasetMode::sft_packed ||
                                         (c.dataset_mode == DatasetMode::token_stream && c.document_aware));
}

std::size_t context_parallel_multiple(const Config& c) noexcept {
  return pads_sequences_for_context_parallel(c) ? 2 * static_cast<std::size_t>(c.context_parallel_size) : 1;
}

void check_context_parallel_rows(const Config& c) {
  const bool pads = pads_sequences_for_context_parallel(c);
  if (!pads && !splits_rows_for_context_parallel(c)) return;
  const std::int64_t multiple = 2 * c.context_parallel_size;
  const auto check = [&](const std::string& key, std::int64_t block_size) {
    if (block_size % multiple == 0) return;
    const std::string why =
        pads
            ? std::string("dataset_mode=") + to_string(c.dataset_mode) + (c.document_aware ? " (document_aware)" : "") +
                  " pads every sequence of a row to a multiple of 2 x context_parallel_size"
            : std::string("context_parallel_split=true cuts every row into 2 x context_parallel_size chunks");
    throw Error(ErrorKind::config, "config key '" + key + "' is " + std::to_string(block_size) + " but " + why +
                                       " = 2 x " + std::to_string(c.context_parallel_size) + " = " +
                                       std::to_string(multiple) + ", so " + key + " must be a multiple of " +
                                       std::to_string(multiple));
  };
  check("block_size", c.block_size);
  if (c.val_overrides.block_size) check("val.block_size", *c.val_overrides.block_size);
}

void settle_context_parallel_padding(ResolvedOptions& r) {
  Config& c = r.config;
  check_context_parallel_rows(c);
  if (pads_sequences_for_context_parallel(c) && !r.episode_mode()) {
    // A document-aware token stream pads its documents for context parallelism: with the
    // SFT modes' pad id, else the end-of-text id.
    const std::optional<PadChoice> pad = pad_from_metadata(c, r.metadata);
    if (!pad && !c.eos_token_id) {
      throw Error(ErrorKind::config, "document_aware=true with context_parallel_size " +
                                         std::to_string(c.context_parallel_size) +
                                         " pads each document of a row, but no pad id is known: set pad_token_id (or "
                                         "eos_token_id) in the config or in '" +
                                         r.metadata_file() + "'");
    }
    c.pad_token_id = pad ? pad->id : *c.eos_token_id;
    r.pad_source = pad ? pad->source : "eos_token_id, for the context-parallel padding";
  }
}

void check_context_parallel_rank(const Config& c) {
  if (!splits_rows_for_context_parallel(c) || c.context_parallel_rank) return;
  throw Error(ErrorKind::config,
              "context_parallel_split=true gives each context-parallel rank its share of the rows, but this "
              "process's context-parallel rank is unknown: world_size " +
                  std::to_string(c.world_size) +
                  " is not a multiple of the parallel sizes, so the layout does not give it; set "
                  "context_parallel_rank in the config");
}

void check_balance_ranks(const Config& c) {
  if (c.balance_ranks == RankBalance::none) return;
  const std::string key = std::string("config key 'balance_ranks' is ") + to_string(c.balance_ranks);
  if (!c.mixture.empty()) {
    throw Error(ErrorKind::config, key +
                                       ", which balances the rows one sft_packed dataset packs; a mixture's rows "
                                       "come from its sources by the schedule: remove the key");
  }
  if (c.dataset_mode != DatasetMode::sft_packed) {
    throw Error(ErrorKind::config, key +
                                       ", which balances packed rows across ranks; it applies to "
                                       "dataset_mode=sft_packed, not " +
                                       to_string(c.dataset_mode));
  }
}

ResolvedOptions resolve_options(Config config) {
  validate_config(config);
  ResolvedOptions r;
  settle_ranks(config, r);
  check_context_parallel_rank(config);
  settle_decode_threads(config, r);
  r.config = std::move(config);
  if (r.mixture()) {
    check_balance_ranks(r.config);
    (void)shape_schedule_of(r.config, "train");  // its stages checked against the data-parallel size now
    return r;
  }
  Config& c = r.config;

  check_dataset_dir(c);
  r.metadata = read_dataset_metadata(c.dataset_dir);
  const DatasetMetadata& metadata = r.metadata;

  if (c.dataset_mode == DatasetMode::auto_detect) c.dataset_mode = detect_mode(c.dataset_dir);
  if (c.truncation == Truncation::split && c.dataset_mode == DatasetMode::token_stream) {
    throw Error(ErrorKind::config, "config key 'truncation' is split, which cuts episodes into pieces, but '" +
                                       c.dataset_dir.string() +
                                       "' holds a token stream (dataset_mode=token_stream, detected): remove the key");
  }
  if (!c.batch_sampling_mode) c.batch_sampling_mode = r.episode_mode() ? SamplingMode::epoch : SamplingMode::random;
  (void)shape_schedule_of(c, "train");  // its stages checked against the data-parallel size now
  if (r.packed_mode() && *c.batch_sampling_mode != SamplingMode::epoch) {
    throw Error(ErrorKind::config,
                "dataset_mode=sft_packed packs each epoch's episode order into rows; it needs "
                "batch_sampling_mode=epoch, not random");
  }
  // The dataset's own record of its dtypes comes first; a config that names another one is
  // describing some other dataset, so the disagreement is an error rather than a silent
  // reinterpretation of the bytes.
  const std::string metadata_file = r.metadata_file();
  const auto token_dtype = settle_dtype(c.token_dtype, metadata.token_dtype, config_key("token_dtype"), metadata_file);
  const auto mask_dtype = settle_dtype(c.mask_dtype, metadata.mask_dtype, config_key("mask_dtype"), metadata_file);
  c.token_dtype = token_dtype;  // else inferred per split when they open
  c.mask_dtype = mask_dtype;
  if (r.episode_mode()) {
    const std::optional<PadChoice> pad = pad_from_metadata(c, metadata);
    if (!pad) {
      throw Error(ErrorKind::config,
                  "config key 'pad_token_id' is not set and '" + metadata_file +
                      "' gives none of pad_token_id, eot_token_id, eos_token_id; set pad_token_id in the config");
    }
    c.pad_token_id = pad->id;
    r.pad_source = pad->source;
  }
  if (c.document_aware) {
    if (r.episode_mode()) {
      throw Error(ErrorKind::config,
                  std::string("config key 'document_aware' applies to dataset_mode=token_stream, not ") +
                      to_string(c.dataset_mode));
    }
    // Without one, every token file must index its documents (a Megatron .idx): the
    // stream's splits check that when they open (StreamModeBuilder).
    c.eos_token_id = end_of_text_id(c.eos_token_id, metadata);
  }
  settle_context_parallel_padding(r);
  check_balance_ranks(c);
  if (!r.episode_mode()) {
    if (c.use_loss_mask.value_or(false)) {
      log_line(LogLevel::warning,
               "[tokenfeed] warning: use_loss_mask applies to episode datasets; token_stream "
               "batches have no mask");
    }
    c.use_loss_mask = false;
  }
  if (r.episode_mode()) {
    std::error_code ec;
    const fs::path train_dir = c.dataset_dir / "train";
    if (!fs::exists(train_dir, ec))
      throw Error(ErrorKind::io, "split directory '" + train_dir.string() + "' does not exist");
  }
  return r;
}

void settle_use_loss_mask(Config& config, const std::string& with, const std::string& without) {
  if (!config.use_loss_mask) {  // auto
    if (!with.empty() && !without.empty()) {
      throw Error(ErrorKind::config, "use_loss_mask=auto: split " + with + " of '" + config.dataset_dir.string() +
                                         "' has mask.bin but split " + without +
                                         " has none; set use_loss_mask to true or false in the config");
    }
    config.use_loss_mask = !with.empty();
    if (with.empty()) {
      log_line(LogLevel::warning,
               "[tokenfeed] warning: use_loss_mask=auto and the dataset has no mask.bin; "
               "every position is trained on");
    }
    return;
  }
  if (*config.use_loss_mask && !without.empty()) {
    log_line(LogLevel::warning, "[tokenfeed] warning: use_loss_mask=true but the dataset has no mask.bin (split " +
                                    without + "); returning x and y only");
  }
  if (!*config.use_loss_mask && !with.empty()) {
    log_line(LogLevel::info,
             "[tokenfeed] use_loss_mask=false set in the config: every position is trained on, "
             "although the dataset has mask.bin (split " +
                 with + ")");
  }
}

// ---- ResolvedOptions: each split's view ----

const ResolvedOptions& ResolvedOptions::for_split(std::string_view name) {
  const Config::SplitOverrides& own = config.overrides_for(name);
  if (name != "val" || (!own.batch_size && !own.block_size)) return *this;
  if (!val_view) {
    val_view = std::make_shared<ResolvedOptions>(*this);
    val_view->val_view.reset();
  }
  val_view->config = with_val_shape(config);
  return *val_view;
}

void ResolvedOptions::sync_split_views() {
  if (val_view) val_view->config = with_val_shape(config);
}

}  // namespace tokenfeed
