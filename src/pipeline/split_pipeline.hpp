// SplitPipeline: the background pipeline that keeps one split's ready batches ahead of
// the trainer: a oneTBB flow graph in its own task arena (sampler -> limiter -> parallel
// decode -> sequencer -> collator) fills a lock-free ring of ready batches, which
// get_batch pops on the trainer's thread. It has two halves, each in its own unit:
//
//   - the producer (pipeline/batch_producer.hpp): the graph, the threads that run it, the
//     ring's pushing side, auto depth's growth and read-ahead;
//   - the trainer's side (split_pipeline.cpp): pop(), and what it does when the ring is
//     empty: it sends the admissions it owes, may run the graph's tasks itself (help),
//     spins briefly, then sleeps on the TrainerWaiter (pipeline/trainer_waiter.hpp) until
//     several batches are ready.
//
// The trainer's pops let more batches start: in bulk, once the ring is down to half the
// depth, through a small admitter thread (pipeline/admitter.hpp), which a trainer at a
// steady pace never has to wake (pipeline/trainer_pace.hpp: the admitter looks on its own
// before the ring runs low), and directly when the ring is empty (the trainer waits then in
// any case). With one decode thread, the admitter thread is that decoder: the arena then has
// no TBB worker, whose spin after each burst of work would cost a slow trainer's loader
// more than the rest of its overhead. A pop from a non-empty ring touches no cache line a
// decoder writes but the ring's, the batch's and, once a run, the admitter's. A failure in any stage travels in
// order, inside its slot, and is rethrown by pop().
//
// Its other parts: auto depth (pipeline/auto_depth.hpp: pop() measures, the collator
// applies a larger depth by allocating slots and then admitting batches; a limiter's
// threshold is fixed at construction, so it is built with the maximum and one negative
// decrement at start reserves the headroom above the starting depth), read-ahead on a cold
// page cache (pipeline/read_ahead.hpp), and the node bodies' ordering made visible to
// ThreadSanitizer (pipeline/node_body.hpp).
//
// Thread-safety: pop() and prefetch_depth() must be called by one thread at a time (the
// trainer); stop() may be called from any thread and wakes a blocked pop() and the
// admitter. The destructor stops, joins the admitter and waits for the stages to finish,
// which they do promptly: queued work is cancelled.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

#include "pipeline/auto_depth.hpp"
#include "pipeline/batch_pool.hpp"
#include "pipeline/batch_source.hpp"

namespace tokenfeed {

class SplitPipeline {
 public:
  // The name of the one decode thread of a pipeline with Options::threads == 1.
  static constexpr const char* kLoneDecoderThreadName = "tf-decode";

  struct Options {
    std::size_t prefetch_depth = 8;      // the depth to start with (the fixed depth)
    // Decode threads (pop() may decode beside them): TBB workers, or for 1 the admitter
    // thread itself (kLoneDecoderThreadName), which sleeps as soon as the graph is idle.
    std::size_t threads = 1;
    std::uint64_t start_step = 0;        // the first batch produced
    std::size_t max_prefetch_depth = 0;  // auto: grow up to this; <= prefetch_depth: fixed
    // false: the trainer has no CPU of its own beside the decoders (the process's share of
    // the node is used up by them), so pop() sleeps at once instead of spinning.
    bool trainer_may_spin = true;
  };

  // The depths a split runs with: a fixed configured depth (configured > 0), or auto's
  // start (kAutoStartDepth per decode thread) and its maximum, the most batches whose
  // buffers, with the trainer's `held` ones, fit in memory_mb (at least 1, at most
  // kMaxAutoDepth); the start never exceeds the maximum.
  using Depths = AutoDepth::Depths;
  static constexpr std::size_t kMaxAutoDepth = AutoDepth::kMaxDepth;
  // Auto's start per decode thread (see plan_depths).
  static constexpr std::size_t kAutoStartDepth = AutoDepth::kStartDepth;
  static Depths plan_depths(std::int64_t configured, std::int64_t memory_mb, std::size_t slot_bytes,
                            std::size_t threads, std::size_t held) noexcept;

  // Auto's rule, applied once per window of pops: the depth to ask for after a window in
  // which the trainer waited `waits` times (over 20 us), stepped `step_us` between pops
  // on average, and a batch took `decode_us` to decode on one of `threads` decoders.
  // Doubles, up to `max`, when there were waits although production keeps up (jitter);
  // otherwise returns `current` (when production is slower than the trainer, no depth
  // stops the waits).
  static std::size_t next_auto_depth(std::size_t current, std::size_t max, std::uint64_t waits, double step_us,
                                     double decode_us, std::size_t threads) noexcept;

  // Starts producing at once. REQUIRES: source outlives the pipeline; the pool has at
  // least prefetch_depth + the trainer's held batches slots, and a capacity of
  // max_prefetch_depth + held when auto.
  SplitPipeline(BatchSource& source, std::shared_ptr<detail::BatchPool> pool, Options options);
  ~SplitPipeline();
  SplitPipeline(const SplitPipeline&) = delete;
  SplitPipeline& operator=(const SplitPipeline&) = delete;

  // The next slot in step order, blocking until it is ready (a brief spin, then a futex
  // wait that burns no core). `waited_us` receives the time spent waiting. The caller owns
  // the slot. Rethrows a stage's failure (and again on every later call); throws
  // Error(usage) after stop().
  // With a deadline: nullptr when no slot was ready by then (nothing is consumed). A call
  // made within 10 ms of that return continues the wait (`waited_us` counts from the first
  // call's wait, and the trainer's step ended at the first call).
  detail::BatchSlot* pop(double& waited_us,
                         std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

  // The depth in effect now (batches admitted ahead of the trainer).
  std::size_t prefetch_depth() const noexcept;

  // The futex wakes pop() has made to the admitter thread so far (for tests and
  // benchmarks: a paced trainer makes none, see pipeline/trainer_pace.hpp).
  std::uint64_t admitter_wakes() const noexcept;

  // Stops producing and wakes a blocked pop(). Idempotent; does not wait.
  void stop() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenfeed
