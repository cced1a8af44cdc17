// SampledRowSource: what the sft_episode and token_stream modes share. Each batch is the
// rows an EpisodeSampler picks for it (an epoch order or random draws, through
// EpochOrders), and each row is decoded on its own: a whole batch by decode(), a single
// row into another batch by decode_row() (a mixture's rows). A mode implements
// decode_into() for one row.
//
// Thread-safety: plan() is called by one thread at a time; the const members may run
// concurrently on different slots.
#pragma once

#include <cstddef>
#include <cstdint>

#include "modes/epoch_orders.hpp"
#include "pipeline/batch_pool.hpp"
#include "pipeline/batch_source.hpp"

namespace tokenfeed {

class SampledRowSource : public BatchSource {
 public:
  BatchPlan plan(std::uint64_t step) override { return plan_sampled_batch(orders_.sample(step)); }
  void decode(const BatchPlan& batch_plan, detail::BatchSlot& slot) const override {
    const SampledBatch& plan = batch_plan.mode_data_as<SampledBatch>();
    slot.begin_batch(plan.step, plan.epoch, plan.batch_in_epoch, sampler_.real_rows(plan));
    const std::size_t rows = slot.episode_ids.size();
    for (std::size_t r = 0; r < rows; ++r) {
      if (r + 1 < rows) prefetch_row(plan, r + 1);
      decode_into(plan, r, slot, r);
    }
  }
  bool decode_row(const BatchPlan& batch_plan, detail::BatchSlot& slot, std::size_t row) const override {
    decode_into(batch_plan.mode_data_as<SampledBatch>(), 0, slot, row);
    return true;
  }
  std::uint64_t batches_in_epoch(std::uint64_t) const override { return sampler_.batches_per_epoch(); }
  std::uint64_t samples_in_epoch(std::uint64_t) const override { return sampler_.samples_per_epoch(); }

 protected:
  // REQUIRES: orders (and its sampler) outlive the source.
  explicit SampledRowSource(const EpochOrders& orders) noexcept : orders_(orders), sampler_(orders.sampler()) {}

  // Writes row `plan_row` of the sampled batch into row `r` of `slot`, every field of it.
  virtual void decode_into(const SampledBatch& plan, std::uint64_t plan_row, detail::BatchSlot& slot,
                           std::size_t r) const = 0;

  // Asks the CPU to start loading the first cache lines of a row that is decoded next, so
  // that its reads overlap the current row's work. A hint: may do nothing.
  virtual void prefetch_row(const SampledBatch&, std::uint64_t) const noexcept {}

  const EpochOrders& orders_;
  const EpisodeSampler& sampler_;
};

}  // namespace tokenfeed
