#include "modes/packed_batch_source.hpp"

#include <algorithm>

#include "modes/episode_batch_source.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

PackedBatchSource::PackedBatchSource(const EpisodeSplit& split, const EpisodeWindows& windows,
                                     const EpochOrders& orders, Options options)
    : split_(split), windows_(windows), orders_(orders), options_(options) {
  positions_of_.assign(split.num_episodes(), 0);
  const EpisodeSampler& order = orders.sampler();
  for (std::uint64_t i = 0; i < order.size(); ++i) {
    const std::uint64_t id = order.id_at(i);
    const std::size_t n = windows.window(id).size();
    positions_of_[id] = static_cast<std::uint32_t>(n - 1);  // kept episodes have n >= 2
  }
}

std::shared_ptr<const PackedEpoch> PackedBatchSource::packing(std::uint64_t epoch) const {
  return packings_.get(epoch, [this, epoch] { return make_packing(epoch); });
}

PackedEpoch PackedBatchSource::make_packing(std::uint64_t epoch) const {
  return pack_episodes(*orders_.get(epoch), positions_of_, static_cast<std::uint32_t>(options_.block_size),
                       options_.lookahead);
}

std::uint64_t PackedBatchSource::batches_in_epoch(std::uint64_t epoch) const {
  const std::uint64_t rows = packing(epoch)->rows();
  const std::uint64_t global = options_.batch_size * options_.world_size;
  return options_.drop_last ? rows / global : (rows + global - 1) / global;
}

std::uint64_t PackedBatchSource::samples_in_epoch(std::uint64_t epoch) const {
  const auto packed = packing(epoch);
  const std::uint64_t rows =
      std::min(packed->rows(), batches_in_epoch(epoch) * options_.batch_size * options_.world_size);
  return packed->row_begin[rows];
}

void PackedBatchSource::seek(std::uint64_t step, std::uint64_t epoch, std::uint64_t batch_in_epoch) {
  std::lock_guard lock(mutex_);
  next_step_ = step;
  next_epoch_ = epoch;
  next_batch_ = batch_in_epoch;
}

BatchPlan PackedBatchSource::plan(std::uint64_t step) {
  std::uint64_t epoch = 0, batch = 0;
  {
    std::lock_guard lock(mutex_);
    if (step != next_step_) {
      throw Error(ErrorKind::pipeline, "packed batches must be planned in order: expected step " +
                                           std::to_string(next_step_) + ", got " + std::to_string(step));
    }
    // An epoch that packs into fewer rows than one global batch (drop_last) has no batch:
    // the stream goes on with the next one. Epochs pack the same episodes, so their row
    // counts differ only slightly; a split where no epoch forms a batch is refused
    // before any plan (Loader), and the bound below only guards against looping forever.
    for (int skipped = 0; batches_in_epoch(next_epoch_) == 0; ++skipped) {
      if (skipped == 64) {
        throw Error(ErrorKind::config, "split '" + split_.dir().string() + "' packs into fewer rows than one global "
                                       "batch in 64 consecutive epochs; set epoch_drop_last=false or a smaller batch_size");
      }
      ++next_epoch_;
      next_batch_ = 0;
    }
    epoch = next_epoch_;
    batch = next_batch_;
  }
  BatchPlan p;
  p.step = step;
  p.epoch = epoch;
  p.batch_in_epoch = batch;
  p.mode_data = packing(epoch);
  // The next epoch's order and packing are made in the background, ready before the
  // sampler reaches them (an epoch boundary would otherwise stall the trainer).
  packings_.prefetch(epoch + 1, [this, next = epoch + 1] { return make_packing(next); });
  const std::uint64_t per_epoch = batches_in_epoch(epoch);
  std::lock_guard lock(mutex_);
  ++next_step_;
  if (++next_batch_ >= per_epoch) {
    next_batch_ = 0;
    ++next_epoch_;
  }
  return p;
}

void PackedBatchSource::decode(const BatchPlan& plan, detail::BatchSlot& slot) const {
  const PackedEpoch& packed = plan.mode_data_as<PackedEpoch>();
  const std::size_t rows = slot.episode_ids.size();
  const std::size_t T = options_.block_size;
  slot.begin_batch(plan.step, plan.epoch, plan.batch_in_epoch, 0);  // real rows counted below
  const std::uint64_t first_row = (plan.batch_in_epoch * options_.world_size + options_.rank) * options_.batch_size;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::uint64_t global_row = first_row + r;
    std::size_t column = 0;
    slot.episode_ids[r] = -1;
    if (global_row < packed.rows()) {
      ++slot.real_rows;
      for (std::uint64_t k = packed.row_begin[global_row]; k < packed.row_begin[global_row + 1]; ++k) {
        const std::uint64_t episode = packed.episodes[k];
        const SftWindow window = windows_.window(episode);
        const std::size_t positions = window.size() - 1;
        const std::size_t at = r * T + column;
        if (k == packed.row_begin[global_row]) slot.episode_ids[r] = static_cast<std::int64_t>(episode);
        windows_.read_tokens(episode, window, 0, positions, slot.x.data() + at);
        std::int64_t* labels = slot.labels.data() + at;
        float* weights = slot.token_weights.data() + at;
        windows_.read_tokens(episode, window, 1, positions, labels);
        if (options_.with_mask) {
          windows_.read_mask(episode, window, 1, positions, weights);
        } else {
          std::fill(weights, weights + positions, 1.0f);
        }
        for (std::size_t i = 0; i < positions; ++i) {
          if (weights[i] == 0.0f) labels[i] = options_.ignore_index;
          slot.position_ids[at + i] = static_cast<std::int32_t>(i);
        }
        slot.add_sequence(positions);
        slot.segments[slot.segment_count++] = {static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(column),
                                               static_cast<std::uint32_t>(positions), static_cast<std::int64_t>(episode)};
        column += positions;
      }
    }
    slot.real_positions += column;
    finish_row_padding(slot, r, T, column, options_.pad_token_id, options_.ignore_index);
  }
}

}  // namespace tokenfeed
