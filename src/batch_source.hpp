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

namespace tokenfeed {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  virtual BatchPlan plan(std::uint64_t step) const = 0;
  // Fills every buffer of `slot` (and its bookkeeping) for `plan`. May throw.
  virtual void decode(const BatchPlan& plan, detail::BatchSlot& slot) const = 0;
};

}  // namespace tokenfeed
