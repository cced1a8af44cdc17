// BatchSource: what a split's pipeline needs from a dataset mode: where batch k comes
// from (plan, called only by the pipeline's sampler stage) and how to fill a slot with it
// (decode, called in parallel).
//
// Contract: both are pure functions of their arguments, so that the output is the same
// for any thread count or prefetch depth, and batch k does not depend on how the run got
// there (exact resume).
#pragma once

#include <cstdint>

#include "batch_pool.hpp"
#include "episode_sampler.hpp"
#include "resume_state.hpp"

namespace tokenfeed {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Called with consecutive steps from where the stream starts (see seek); may throw.
  virtual BatchPlan plan(std::uint64_t step) const = 0;
  // Fills every buffer of `slot` (and its bookkeeping) for `plan`. May throw.
  virtual void decode(const BatchPlan& plan, detail::BatchSlot& slot) const = 0;
  // A hint, from the sampler stage, that `plan` will be decoded soon: a source may ask the
  // kernel to read its pages ahead (madvise WILLNEED). Must not throw; the default does
  // nothing.
  virtual void will_need(const BatchPlan& plan) const noexcept { (void)plan; }
  // Throws Error(io) naming a file that became shorter while mapped (MappedFile::damaged):
  // a batch decoded since then may hold zeros in place of data. Called after decode once
  // MappedFile::any_damaged(). The default has no files.
  virtual void check_intact() const {}
  // Batches in epoch `epoch`; 0 when the mode has no epochs (random sampling).
  virtual std::uint64_t batches_in_epoch(std::uint64_t epoch) const = 0;
  // Episodes or windows an epoch delivers over all ranks (the drop_last remainder aside).
  virtual std::uint64_t samples_in_epoch(std::uint64_t epoch) const = 0;
  // Where the next plan() starts: batch `at.step`, which is batch `at.batch_in_epoch` of
  // `at.epoch`. Sources whose epochs all have the same length derive the position from the
  // step and ignore the rest; packed epochs differ in length, so they need it.
  virtual void seek(const SplitPosition& at) { (void)at; }
};

}  // namespace tokenfeed
