// SplitPipeline: the background pipeline that keeps one split's ready batches ahead of
// the trainer, as a oneTBB flow graph in its own task arena:
//
//   input_node (sampler: the only place the step counter advances; hands its plan to
//               decode through our own queue, the message is an empty token)
//     -> limiter_node (at most prefetch_depth batches in flight or ready)
//     -> function_node decode (parallel, decode_threads; writes into pooled slots)
//     -> sequencer_node (restores step order)
//     -> function_node collator (serial; pushes into the ready ring)
//   ring: boost::lockfree::spsc_queue of slots, popped by get_batch on the trainer's thread.
//
// The trainer's pop decrements the limiter, letting one more batch start. A failure in
// any stage travels in order, inside its slot, and is rethrown by pop().
//
// Thread-safety: pop() must be called by one thread at a time (the trainer); stop() may be
// called from any thread and wakes a blocked pop(). The destructor stops and waits for the
// stages to finish, which they do promptly: queued work is cancelled.
#pragma once

#include <cstdint>
#include <memory>

#include "batch_pool.hpp"
#include "batch_source.hpp"

namespace tokenfeed {

class SplitPipeline {
 public:
  struct Options {
    std::size_t prefetch_depth = 8;
    std::size_t threads = 1;          // decode concurrency and arena size (TBB workers)
    std::uint64_t start_step = 0;     // the first batch produced
  };

  // Starts producing at once. REQUIRES: source outlives the pipeline; the pool has at
  // least prefetch_depth + the trainer's held batches slots.
  SplitPipeline(const BatchSource& source, std::shared_ptr<detail::BatchPool> pool, Options options);
  ~SplitPipeline();
  SplitPipeline(const SplitPipeline&) = delete;
  SplitPipeline& operator=(const SplitPipeline&) = delete;

  // The next slot in step order, blocking until it is ready (a brief spin, then a futex
  // wait that burns no core). `waited_us` receives the time spent waiting. The caller owns
  // the slot. Rethrows a stage's failure (and again on every later call); throws
  // Error(usage) after stop().
  detail::BatchSlot* pop(double& waited_us);

  // Stops producing and wakes a blocked pop(). Idempotent; does not wait.
  void stop() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenfeed
