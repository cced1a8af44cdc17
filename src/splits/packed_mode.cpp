#include "splits/packed_mode.hpp"

#include <utility>

#include "splits/shape_plan.hpp"

namespace tokenfeed {

void PackedModeBuilder::add_order_fields(const Config& settled, OrderFields& fields) const {
  EpisodeModes::add_order_fields(settled, fields);
  fields["block_size"] = std::to_string(settled.block_size);
  fields["pack_lookahead"] = std::to_string(settled.pack_lookahead);
  fields["truncation"] = to_string(settled.truncation);
  // Context parallelism pads every episode to a multiple of 2·cp, which changes the packing.
  if (pads_sequences_for_context_parallel(settled)) {
    fields["context_parallel_padding"] = std::to_string(context_parallel_multiple(settled));
  }
}

EpisodeSampler::Settings PackedModeBuilder::order_settings(const Config& settled, const std::string& split) {
  EpisodeSampler::Settings order = sampler_settings(settled, split);
  order.batch_size = 1;
  order.world_size = 1;
  order.rank = 0;
  order.drop_last = false;
  order.schedule = nullptr;  // the packed rows are scheduled (packing_options), not the order
  return order;
}

bool PackedModeBuilder::packed_rows_change_length(const Config& settled, const std::string& name) const {
  const std::shared_ptr<const ShapeSchedule> schedule = shape_schedule_of(settled, name);
  return schedule && schedule->changes_block_size();
}

PackedBatchSource::Options PackedModeBuilder::packing_options(const Config& settled, const std::string& split,
                                                              bool with_mask) {
  PackedBatchSource::Options packing;
  packing.block_size = static_cast<std::size_t>(settled.block_size);
  packing.batch_size = static_cast<std::uint64_t>(settled.batch_size);
  packing.world_size = data_parallel_size(settled);
  packing.rank = data_parallel_rank(settled);
  packing.drop_last = settled.drop_last_for(split);
  packing.lookahead = static_cast<std::size_t>(settled.pack_lookahead);
  packing.pad_token_id = settled.pad_token_id.value_or(0);
  packing.ignore_index = settled.ignore_index;
  packing.with_mask = with_mask;
  packing.sequence_multiple = context_parallel_multiple(settled);
  packing.balance_attention = settled.balance_ranks == RankBalance::attention;
  packing.schedule = shape_schedule_of(settled, split);
  if (splits_rows_for_context_parallel(settled)) {
    packing.split_ranks = static_cast<std::size_t>(settled.context_parallel_size);
    packing.split_rank = static_cast<std::size_t>(settled.context_parallel_rank.value_or(0));
  }
  return packing;
}

std::unique_ptr<DatasetSplit> PackedModeBuilder::split_over(const ResolvedOptions& settled, const std::string& name,
                                                            std::unique_ptr<SplitData> data,
                                                            const detail::BatchShape& shape,
                                                            DatasetSplit::Description description) const {
  const Config& config = settled.config;
  // sft_packed writes this rank's context-parallel share itself.
  // Under a sequence-length schedule each row keeps its episodes at its own length.
  std::vector<const EpisodeWindows*> stage_windows = EpisodeModes::stage_windows(settled, name, *data);
  auto source =
      std::make_unique<PackedBatchSource>(*data->episodes, *data->windows, *data->orders,
                                          packing_options(config, name, shape.with_mask), std::move(stage_windows));
  return std::make_unique<PackedEpochsSplit>(name, config, std::move(data), std::move(source), shape,
                                             std::move(description));
}

}  // namespace tokenfeed
