// MixtureBatchSource: a mixture's batches, each row taken from one source's own stream.
//
// Row i of this rank's batch `step` is global row g = rows_before(step) + rank * B + i,
// where rows_before and the step's global batch G come from the schedule's step axis
// (MixtureSchedule::steps(): G = batch_size * world_size at every step, or a batch-size
// schedule's) and B = G / world_size is this rank's rows at that step; the MixtureSchedule
// says which source row g comes from and which row k of that source's stream it is. Each source is a BatchSource over
// its own dataset opened with batch_size 1 and world_size 1, so its batch k is exactly its row k. A source that samples
// rows by id (sft_episode, token_stream) names its row k by that id at planning and writes it straight into the
// mixture's row (SampledRowSource::row_id and decode_row_id); any other source (sft_packed) plans its batch k and
// decodes it into a one-row slot of its own shape, whose row the mixture copies. A source's rows are therefore
// bit-identical to its single-source stream, and batch `step` depends on nothing but the step.
//
// The mixture's own batches have no epochs (epoch 0, batch_in_epoch == step); each source
// turns over its own epochs (epoch_of / epoch_first_row).
//
// Thread-safety: plan() and seek() are called by the pipeline's serial stage; decode() and
// the const members may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "modes/epoch_orders.hpp"
#include "modes/sampled_row_source.hpp"
#include "pipeline/batch_pool.hpp"
#include "pipeline/batch_source.hpp"
#include "sampling/mixture_schedule.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed {

class MixtureBatchSource final : public BatchSource {
 public:
  struct Member {
    BatchSource* source = nullptr;  // batch k is the source's row k
    // The same source when it samples rows by id (the episode and token-stream modes), as
    // its opener knows it: its rows are then planned as ids (row_id), without a plan per
    // row. Null for any other source.
    SampledRowSource* sampled = nullptr;
    detail::BatchShape shape;  // that source's own one-row shape
    Epochs epochs = Epochs::equal;
  };
  struct Options {
    std::uint64_t world_size = 1;  // the data-parallel size, which divides every step's rows
    std::uint64_t rank = 0;
  };

  // REQUIRES: every member's source and the schedule outlive this; shape describes the
  // mixture's slots (contract fields on, source ids on; rows: the most of any step).
  MixtureBatchSource(std::vector<Member> members, const MixtureSchedule& schedule, detail::BatchShape shape,
                     Options options);

  BatchPlan plan(std::uint64_t step) override;
  void decode(const BatchPlan& plan, detail::BatchSlot& slot) const override;
  void will_need(const BatchPlan& plan) const noexcept override;
  void check_intact() const override;
  std::uint64_t batches_in_epoch(std::uint64_t) const override { return 0; }
  std::uint64_t samples_in_epoch(std::uint64_t) const override { return 0; }

  // The epoch of source `source`'s row k, and the first row of its epoch e. REQUIRES: the
  // source has epochs.
  std::uint64_t epoch_of(std::size_t source, std::uint64_t k) const;
  std::uint64_t epoch_first_row(std::size_t source, std::uint64_t epoch) const;
  bool has_epochs(std::size_t source) const noexcept { return members_[source].epochs != Epochs::none; }

  // Plans from now on by `schedule` (a weight change). REQUIRES: no pipeline runs over this
  // source (plan and decode read the schedule); `schedule` outlives this or the next call,
  // and has the same step axis.
  void use_schedule(const MixtureSchedule& schedule) noexcept { schedule_ = &schedule; }

 private:
  std::vector<Member> members_;
  const MixtureSchedule* schedule_;
  detail::BatchShape shape_;
  Options options_;

  // Varying-length epochs: per source, the first row of each epoch seen so far.
  mutable Mutex epochs_mutex_;
  mutable std::vector<std::vector<std::uint64_t>> epoch_starts_ TF_GUARDED_BY(epochs_mutex_);
};

}  // namespace tokenfeed
