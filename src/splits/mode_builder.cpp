#include "splits/mode_builder.hpp"

#include <utility>

#include "modes/context_parallel_split.hpp"
#include "splits/episode_modes.hpp"
#include "splits/packed_mode.hpp"
#include "splits/shape_plan.hpp"
#include "splits/stream_mode.hpp"

namespace tokenfeed {

ModeBuilder::~ModeBuilder() = default;

const ModeBuilder& mode_builder(DatasetMode mode) {
  static const EpisodeModeBuilder episode;
  static const PackedModeBuilder packed;
  static const StreamModeBuilder stream;
  switch (mode) {
    case DatasetMode::sft_episode:
      return episode;
    case DatasetMode::sft_packed:
      return packed;
    case DatasetMode::token_stream:
      return stream;
    case DatasetMode::auto_detect:
      break;
  }
  throw Error(ErrorKind::config, "internal: dataset_mode is not settled (auto) where a split opens");
}

OpenedSplits open_dataset_splits(ResolvedOptions& settled) {
  OpenedSplits splits = mode_builder(settled.config.dataset_mode).open_splits(settled);
  settled.sync_split_views();  // val's own shape, with what the splits settled
  return splits;
}

OrderFields order_fields(const Config& config) {
  OrderFields fields;
  // The order depends on the global batch (batch_size x the data-parallel size), never on
  // its split across ranks nor on the tensor, context and pipeline sizes: a state resumes
  // at another layout with the same global batch (sft_packed's context-parallel padding
  // aside, which changes the rows).
  fields["dataset_mode"] = to_string(config.dataset_mode);
  fields["batch_sampling_mode"] = to_string(*config.batch_sampling_mode);
  fields["global_batch_size"] = std::to_string(global_batch_size(config));
  // The train split's batch (and block) sizes by step, only when scheduled: a config
  // without one keeps its fingerprint.
  if (auto schedule = shape_schedule_field(config)) fields["shape_schedule"] = std::move(*schedule);
  fields["epoch_seed"] = std::to_string(config.epoch_seed);
  fields["epoch_shuffle"] = bool_text(config.epoch_shuffle);
  fields["epoch_drop_last"] = bool_text(config.epoch_drop_last);
  // Per-split overrides, only when given: a config without them keeps its fingerprint.
  for (const auto& [name, overrides] :
       {std::pair{"train", config.train_overrides}, std::pair{"val", config.val_overrides}}) {
    if (!overrides.epoch_shuffle && !overrides.epoch_drop_last) continue;
    fields[std::string(name) + ".epoch_shuffle"] = bool_text(config.shuffle_for(name));
    fields[std::string(name) + ".epoch_drop_last"] = bool_text(config.drop_last_for(name));
  }
  add_val_shape_fields(config, fields);
  mode_builder(config.dataset_mode).add_order_fields(config, fields);
  return fields;
}

DocumentHashSplit document_hash_split(const Config& settled) {
  return {settled.val_fraction, static_cast<std::uint64_t>(settled.val_seed)};
}

EpisodeSampler::Settings sampler_settings(const Config& config, const std::string& split) {
  EpisodeSampler::Settings settings;
  settings.mode = *config.batch_sampling_mode;
  settings.shuffle = config.shuffle_for(split);
  settings.drop_last = config.drop_last_for(split);
  settings.seed = static_cast<std::uint32_t>(config.epoch_seed);
  settings.batch_size = static_cast<std::uint64_t>(config.batch_size);
  settings.world_size = data_parallel_size(config);
  settings.rank = data_parallel_rank(config);
  settings.split = split;
  settings.schedule = shape_schedule_of(config, split);
  return settings;
}

detail::BatchShape batch_shape_of(const Config& c, std::size_t rows, bool mask, std::size_t cols) {
  const bool episode = c.dataset_mode != DatasetMode::token_stream;
  const bool packed = c.dataset_mode == DatasetMode::sft_packed;
  detail::BatchShape shape;
  shape.rows = rows;
  shape.cols = cols != 0 ? cols : static_cast<std::size_t>(c.block_size);
  shape.with_mask = mask;
  shape.with_document_fields = c.document_aware;
  shape.y_is_labels = !episode || packed;
  shape.contract_fields = c.contract_fields;
  // sft_episode's mask equals its token weights, so with both only the weights are written.
  shape.mask_is_weights = packed || (episode && c.contract_fields);
  shape.packed = packed;
  shape.padded_sequences = c.contract_fields && pads_sequences_for_context_parallel(c);
  if (splits_rows_for_context_parallel(c)) {
    shape.context_parallel = static_cast<std::size_t>(c.context_parallel_size);
    shape.cols /= shape.context_parallel;
  }
  shape.fields = c.fields;
  return shape;
}

std::unique_ptr<DatasetSplit> split_of_sampled_rows(const std::string& name, const Config& config,
                                                    std::unique_ptr<SplitData> data,
                                                    std::unique_ptr<SampledRowSource> rows,
                                                    const detail::BatchShape& shape,
                                                    DatasetSplit::Description description) {
  SampledRowSource* sampled = rows.get();
  std::unique_ptr<BatchSource> source = std::move(rows);
  if (splits_rows_for_context_parallel(config)) {
    Config whole = config;
    whole.context_parallel_split = false;
    const ContextParallelShare share{static_cast<std::size_t>(config.context_parallel_size),
                                     static_cast<std::size_t>(config.context_parallel_rank.value_or(0)),
                                     pads_sequences_for_context_parallel(config)};
    source = std::make_unique<ContextParallelSplitSource>(
        std::move(source), batch_shape_of(whole, shape.rows, shape.with_mask, shape.full_cols()), share);
    sampled = nullptr;
  }
  if (*config.batch_sampling_mode != SamplingMode::epoch) {
    return std::make_unique<RandomSplit>(name, config, std::move(data), std::move(source), sampled, shape,
                                         std::move(description));
  }
  return std::make_unique<EqualEpochsSplit>(name, config, std::move(data), std::move(source), sampled, shape,
                                            std::move(description));
}

}  // namespace tokenfeed
