// EpochOrders: the epoch orders a split's source is reading, made once by the sampler and
// shared immutably, with the next epoch's made ahead in the background.
//
// Why ahead: an epoch's order over 10M episodes takes the best part of a second to make.
// Made when the pipeline's sampler stage reaches the epoch's first batch, it would stall the
// trainer at every epoch boundary for longer than the prefetched batches cover; sample()
// starts the next epoch's while the current one is consumed.
//
// Thread-safety: every member may be called concurrently. The destructor waits for a
// background make to finish.
#pragma once

#include <cstdint>
#include <memory>

#include "pipeline/batch_plan.hpp"
#include "pipeline/recent_cache.hpp"
#include "sampling/episode_sampler.hpp"

namespace tokenfeed {

class EpochOrders {
 public:
  // REQUIRES: sampler outlives this object.
  explicit EpochOrders(const EpisodeSampler& sampler) noexcept : sampler_(sampler) {}

  const EpisodeSampler& sampler() const noexcept { return sampler_; }

  // Epoch e's order (epoch mode only).
  std::shared_ptr<const EpochOrder> get(std::uint64_t epoch) const {
    return orders_.get(epoch, [this, epoch] { return sampler_.make_epoch_order(epoch); });
  }
  // Starts making epoch e's order in the background.
  void prefetch(std::uint64_t epoch) const {
    orders_.prefetch(epoch, [this, epoch] { return sampler_.make_epoch_order(epoch); });
  }

  // Batch `step`'s position with its epoch's order (epoch mode), the next epoch's order
  // started ahead. Throws what EpisodeSampler::position throws.
  SampledBatch sample(std::uint64_t step) const {
    SampledBatch batch = sampler_.position(step);
    if (sampler_.settings().mode == SamplingMode::epoch) {
      batch.order = get(batch.epoch);
      prefetch(batch.epoch + 1);  // ready before the sampler stage reaches it
    }
    return batch;
  }

 private:
  const EpisodeSampler& sampler_;
  // A trainer reads at most two orders at a time: the epoch being consumed and the next,
  // planned or made ahead. Declared last: its destructor waits for a background make.
  RecentCache<EpochOrder> orders_{2};
};

// The plan of a sampled batch, which travels as its mode data (the episode and token-stream
// modes decode rows from it).
inline BatchPlan plan_sampled_batch(SampledBatch batch) {
  BatchPlan plan;
  plan.step = batch.step;
  plan.epoch = batch.epoch;
  plan.batch_in_epoch = batch.batch_in_epoch;
  plan.mode_data = std::make_shared<const SampledBatch>(std::move(batch));
  return plan;
}

}  // namespace tokenfeed
