// BatchSource: what a split's pipeline needs from a dataset mode: where batch k comes
// from (plan, called only by the pipeline's serial sampler stage) and how to fill a slot
// with it (decode, called in parallel).
//
// Contract: batch k's plan is a function of k and of the position last given to seek(),
// and decode is a pure function of its plan, so that the output is the same for any
// thread count or prefetch depth and batch k does not depend on how the run got there
// (exact resume). plan() may keep a cursor (packed epochs differ in length, so a source
// walks them in order); it is therefore not const, and the pipeline calls it with
// consecutive steps from one thread at a time.
#pragma once

#include <cstdint>

#include "pipeline/batch_plan.hpp"
#include "pipeline/batch_pool.hpp"
#include "pipeline/stream_position.hpp"

namespace tokenfeed {

// How a source's epochs are laid out: none (random sampling), all of batches_in_epoch(0)
// batches, or of varying length (packed), walked in order.
enum class Epochs { none, equal, varying };

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Called with consecutive steps from where the stream starts (see seek), by one thread
  // at a time; may throw.
  virtual BatchPlan plan(std::uint64_t step) = 0;
  // Fills every buffer of `slot` (and its bookkeeping) for `plan`. May throw.
  virtual void decode(const BatchPlan& plan, detail::BatchSlot& slot) const = 0;
  // Writes row 0 of `plan`'s batch into row `row` of `slot`, appending its sequences and
  // real positions, without begin_batch: for a source whose rows another source gathers
  // (a mixture). `slot` has the contract fields and at least the buffers this source's own
  // shape has. Returns false when the source does not support it (the caller then decodes
  // into a slot of the source's own shape and copies). May throw.
  virtual bool decode_row(const BatchPlan& plan, detail::BatchSlot& slot, std::size_t row) const {
    (void)plan;
    (void)slot;
    (void)row;
    return false;
  }
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
