// SampledRowSource: what the sft_episode and token_stream modes share. Each batch is the
// rows an EpisodeSampler picks for it (an epoch order or random draws, through
// EpochOrders), and each row is written from its sampled id alone (an episode, or a
// window): a whole batch by decode(), a single row into another batch by decode_row() or,
// without a plan per row, by row_id() + decode_row_id() (a mixture's rows). A mode
// implements decode_id() for one row.
//
// Thread-safety: plan(), seek() and row_id() are called by one thread at a time (the
// pipeline's serial sampler stage); the const members may run concurrently on different
// slots.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "modes/epoch_orders.hpp"
#include "pipeline/batch_pool.hpp"
#include "pipeline/batch_source.hpp"

namespace tokenfeed {

class SampledRowSource : public BatchSource {
 public:
  BatchPlan plan(std::uint64_t step) override { return plan_sampled_batch(orders_.sample(step)); }
  void decode(const BatchPlan& batch_plan, detail::BatchSlot& slot) const override {
    const SampledBatch& plan = batch_plan.mode_data_as<SampledBatch>();
    const auto rows = static_cast<std::size_t>(plan.rows);
    slot.begin_batch(plan.step, plan.epoch, plan.batch_in_epoch, sampler_.real_rows(plan), rows,
                     static_cast<std::size_t>(plan.cols));
    // Hints run ahead of the rows: the records of the next kRecordsAhead rows, the data of
    // the next one.
    for (std::size_t r = 0; r < std::min(rows, kRecordsAhead); ++r) prefetch_record_id(sampler_.row_episode(plan, r));
    std::int64_t id = rows > 0 ? sampler_.row_episode(plan, 0) : -1;
    for (std::size_t r = 0; r < rows; ++r) {
      if (r + kRecordsAhead < rows) prefetch_record_id(sampler_.row_episode(plan, r + kRecordsAhead));
      const std::int64_t next = r + 1 < rows ? sampler_.row_episode(plan, r + 1) : -1;
      if (next >= 0) prefetch_id(next);
      decode_id(id, slot, r);
      id = next;
    }
  }
  void will_need(const BatchPlan& batch_plan) const noexcept override {
    const SampledBatch& plan = batch_plan.mode_data_as<SampledBatch>();
    for (std::uint64_t r = 0; r < plan.rows; ++r) {
      const std::int64_t id = sampler_.row_episode(plan, r);
      if (id >= 0) will_need_id(id);
    }
  }
  bool decode_row(const BatchPlan& batch_plan, detail::BatchSlot& slot, std::size_t row) const override {
    decode_id(sampler_.row_episode(batch_plan.mode_data_as<SampledBatch>(), 0), slot, row);
    return true;
  }
  std::uint64_t batches_in_epoch(std::uint64_t epoch) const override { return sampler_.batches_in_epoch(epoch); }
  std::uint64_t samples_in_epoch(std::uint64_t epoch) const override { return sampler_.samples_in_epoch(epoch); }

  // The id of row 0 of batch `step` (-1 for a fill row): for a source that a mixture
  // gathers with batch_size 1 and world_size 1, the id of its row `step`. Equal to what
  // plan(step) and decode_row() would write, without a plan: the epoch order in use is
  // kept here, so consecutive calls within an epoch take no lock and allocate nothing.
  // Called like plan(); may throw what plan() throws. `cols` (a mixture's sequence-length
  // schedule: the length of the step that takes this row; 0: the source's own) sets the
  // ids a random draw is made from (ids_at_length).
  std::int64_t row_id(std::uint64_t step, std::size_t cols = 0) {
    SampledBatch batch = sampler_.position(step);
    if (cols != 0 && sampler_.settings().mode == SamplingMode::random) {
      batch.ids = ids_at_length(cols);
      batch.cols = cols;  // the length drawn at (pieces: which pieces the draw numbers)
    }
    if (sampler_.settings().mode == SamplingMode::epoch) {
      if (!row_order_ || row_order_epoch_ != batch.epoch) {
        row_order_ = orders_.sample(step).order;  // also starts the next epoch's order
        row_order_epoch_ = batch.epoch;
      }
      batch.order = row_order_;
    }
    return sampler_.row_episode(batch, 0);
  }
  // Writes the row of sampled id `id` (from row_id; -1: a fill row) into row `r` of
  // `slot`, as decode_row() does.
  void decode_row_id(std::int64_t id, detail::BatchSlot& slot, std::size_t r) const { decode_id(id, slot, r); }
  // Asks the CPU to start loading the first cache lines of the row of id `id` (>= 0), so
  // that its reads overlap the current row's work. A hint: may do nothing.
  virtual void prefetch_id(std::int64_t id) const noexcept { (void)id; }
  // will_need() for one row of id `id` (>= 0): may ask the kernel to read its pages ahead.
  virtual void will_need_id(std::int64_t id) const noexcept { (void)id; }
  // A hint a few rows ahead of prefetch_id: load whatever must be read to find the row of
  // id `id` (an index record), without waiting for it. Ignores id < 0.
  virtual void prefetch_record_id(std::int64_t id) const noexcept { (void)id; }
  // How many ids a random draw for a row of `cols` positions is made from: the sampler's
  // (an episode is one id at any length), or a mode's own whose ids depend on the length
  // (a token stream's window starts). REQUIRES: cols is a length the source was built for.
  virtual std::uint64_t ids_at_length(std::size_t cols) const noexcept {
    (void)cols;
    return sampler_.size();
  }
  // How many rows ahead decode() issues prefetch_record_id.
  static constexpr std::size_t kRecordsAhead = 4;

 protected:
  // REQUIRES: orders (and its sampler) outlive the source.
  explicit SampledRowSource(const EpochOrders& orders) noexcept : orders_(orders), sampler_(orders.sampler()) {}

  // Writes the row of sampled id `id` (-1: a fill row) into row `r` of `slot`, every
  // field of it.
  virtual void decode_id(std::int64_t id, detail::BatchSlot& slot, std::size_t r) const = 0;

  const EpochOrders& orders_;
  const EpisodeSampler& sampler_;

 private:
  // row_id()'s epoch order in use (epoch mode), touched only by the planning thread.
  std::shared_ptr<const EpochOrder> row_order_;
  std::uint64_t row_order_epoch_ = 0;
};

}  // namespace tokenfeed
