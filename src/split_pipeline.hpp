// SplitPipeline: the background pipeline that keeps one split's ready batches ahead of
// the trainer, as a oneTBB flow graph in its own task arena:
//
//   input_node (sampler: the only place the step counter advances and plan() is called;
//               plans a few batches ahead so that their pages can be read ahead, and
//               hands each plan to decode through our own queue; the message is an empty
//               token)
//     -> limiter_node (at most prefetch_depth batches in flight or ready)
//     -> function_node decode (parallel, decode_threads; writes into pooled slots)
//     -> sequencer_node (restores step order)
//     -> function_node collator (serial; pushes into the ready ring; grows the depth)
//   ring: boost::lockfree::spsc_queue of slots, popped by get_batch on the trainer's thread.
//
// The trainer's pops decrement the limiter, letting more batches start: in bulk, once the
// ring is down to half the depth, through a small admitter thread (a decrement may wake a
// sleeping decoder, which costs TBB tens of microseconds on the calling thread; handing
// it off costs the trainer at most a futex wake), and directly when the ring is empty
// (the trainer waits then in any case). A failure in any stage travels in order, inside
// its slot, and is rethrown by pop().
//
// Auto depth (Options::max_prefetch_depth > prefetch_depth): pop() measures the trainer's
// step (the time between one pop returning and the next being called) and the decode
// time per batch; in each window of pops after warm-up, when the trainer had to wait
// although production keeps up with it on average (so the waits come from jitter, which
// depth absorbs), it asks for twice the depth, up to the maximum. When production is
// slower than the trainer no depth stops the waits, and the starting depth is already
// past the point where depth helps a busy decoder. The collator applies
// the request off the trainer's thread: it allocates the new slots, then admits the new
// batches. (A limiter's threshold is fixed at construction, so it is built with the
// maximum, and one negative decrement at start reserves the headroom above the starting
// depth; growing hands headroom out with positive decrements, which the limiter's clamp
// at zero can never swallow.) The depth never shrinks.
//
// Read-ahead: while decodes incur major page faults (data not in the page cache: a cold
// start), the sampler plans kReadAheadBatches batches beyond what the limiter admitted
// and asks the source to madvise(WILLNEED) their pages, so the kernel reads them
// concurrently instead of one fault at a time inside decode (the episode source also
// marks its files MADV_RANDOM, so a fault no longer drags in a read-around window). With
// a warm cache it issues nothing (the syscalls would only cost time).
// TOKENFEED_READ_AHEAD=0 in the environment turns both hints off, for measuring their
// effect (perf/run.sh).
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

#include "batch_pool.hpp"
#include "batch_source.hpp"

namespace tokenfeed {

class SplitPipeline {
 public:
  struct Options {
    std::size_t prefetch_depth = 8;      // the depth to start with (the fixed depth)
    std::size_t threads = 1;             // decode concurrency and arena size (TBB workers)
    std::uint64_t start_step = 0;        // the first batch produced
    std::size_t max_prefetch_depth = 0;  // auto: grow up to this; <= prefetch_depth: fixed
  };

  // The depths a split runs with: a fixed configured depth (configured > 0), or auto's
  // start (max(threads + 2, kAutoStartDepth)) and its maximum, the most batches whose
  // buffers, with the trainer's `held` ones, fit in memory_mb (at least 1, at most
  // kMaxAutoDepth); the start never exceeds the maximum.
  struct Depths {
    std::size_t initial = 1;
    std::size_t max = 1;
  };
  static constexpr std::size_t kMaxAutoDepth = 64;
  // Auto's start: at least this many, or decode threads + 2 (see plan_depths).
  static constexpr std::size_t kAutoStartDepth = 16;
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
  SplitPipeline(const BatchSource& source, std::shared_ptr<detail::BatchPool> pool, Options options);
  ~SplitPipeline();
  SplitPipeline(const SplitPipeline&) = delete;
  SplitPipeline& operator=(const SplitPipeline&) = delete;

  // The next slot in step order, blocking until it is ready (a brief spin, then a futex
  // wait that burns no core). `waited_us` receives the time spent waiting. The caller owns
  // the slot. Rethrows a stage's failure (and again on every later call); throws
  // Error(usage) after stop().
  // With a deadline: nullptr when no slot was ready by then (nothing is consumed).
  detail::BatchSlot* pop(double& waited_us,
                         std::optional<std::chrono::steady_clock::time_point> deadline = std::nullopt);

  // The depth in effect now (batches admitted ahead of the trainer).
  std::size_t prefetch_depth() const noexcept;

  // Stops producing and wakes a blocked pop(). Idempotent; does not wait.
  void stop() noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tokenfeed
