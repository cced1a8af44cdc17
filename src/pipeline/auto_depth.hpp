// AutoDepth: how deep a split's prefetch runs, fixed or grown by watching the trainer
// (prefetch_depth = auto).
//
// The rule: pop() passes in the trainer's step (the time between one pop returning and the
// next being called, as TrainerPace measures it), counts its waits, and reads the decoders'
// time per batch; in each
// window of kWindow pops after warm-up, when the trainer waited although production keeps
// up with it on average (so the waits come from jitter, which depth absorbs), it asks for
// twice the depth, up to the maximum. When production is slower than the trainer no depth
// stops the waits, and the starting depth is already past the point where depth helps a
// busy decoder. The depth never shrinks. Applying a request (allocating slots, admitting
// batches) is the pipeline's, off the trainer's thread.
//
// Thread-safety: observe_pop() and the consumer-side state belong to the one thread that
// pops; record_decode() may be called by any decoder concurrently; requested() and
// take_note() by any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "util/thread_annotations.hpp"

namespace tokenfeed {

class AutoDepth {
 public:
  // The depths a split runs with: a fixed configured depth (configured > 0), or auto's
  // start (kStartDepth per decode thread) and its maximum, the most batches whose buffers,
  // with the trainer's `held` ones, fit in memory_mb (at least 1, at most kMaxDepth); the
  // start never exceeds the maximum.
  struct Depths {
    std::size_t initial = 1;
    std::size_t max = 1;
  };
  static constexpr std::size_t kMaxDepth = 64;
  // Auto's start per decode thread (see plan).
  static constexpr std::size_t kStartDepth = 16;
  static Depths plan(std::int64_t configured, std::int64_t memory_mb, std::size_t slot_bytes, std::size_t threads,
                     std::size_t held) noexcept;

  // The rule, applied once per window of pops: the depth to ask for after a window in
  // which the trainer waited `waits` times (over kWaitUs), stepped `step_us` between pops
  // on average, and a batch took `decode_us` to decode on one of `threads` decoders.
  // Doubles, up to `max`, when there were waits although production keeps up (jitter);
  // otherwise returns `current`.
  static std::size_t next(std::size_t current, std::size_t max, std::uint64_t waits, double step_us, double decode_us,
                          std::size_t threads) noexcept;

  // Pops per decision window, and the shortest wait that counts (a wait of a few
  // microseconds is a batch landing just in time, not a stall).
  static constexpr std::uint64_t kWindow = 32;
  static constexpr double kWaitUs = 20.0;

  AutoDepth(std::size_t start, std::size_t max, std::size_t threads) noexcept
      : max_(max), threads_(threads), requested_(start) {}

  // A decoder's time for one batch (any thread).
  void record_decode(std::uint64_t ns) noexcept {
    decode_ns_.fetch_add(ns, std::memory_order_relaxed);
    decodes_.fetch_add(1, std::memory_order_relaxed);
  }
  // The decoders' mean time per batch so far, in microseconds (0 before the first; any
  // thread).
  double mean_decode_us() const noexcept {
    const std::uint64_t n = decodes_.load(std::memory_order_relaxed);
    return n == 0 ? 0.0
                  : static_cast<double>(decode_ns_.load(std::memory_order_relaxed)) / 1000.0 / static_cast<double>(n);
  }

  // The consumer's side, once per batch popped: `step` is the trainer's step that this pop
  // ended (nullopt for the first pop; see TrainerPace::popped), `waited_us` how long it
  // waited for the batch. May raise requested().
  void observe_pop(std::optional<std::chrono::nanoseconds> step, double waited_us);

  // The depth asked for (acquire: the note describing it is set before).
  std::size_t requested() const noexcept { return requested_.load(std::memory_order_acquire); }
  std::size_t max() const noexcept { return max_; }
  // Why the last request was made, for the log line that applies it.
  std::string note() const;

 private:
  const std::size_t max_;
  const std::size_t threads_;
  std::atomic<std::size_t> requested_;

  // Written by the decoders on every batch: on a cache line of their own, so that the
  // trainer's window below (written on every pop) does not share it.
  alignas(64) std::atomic<std::uint64_t> decode_ns_{0};
  std::atomic<std::uint64_t> decodes_{0};

  // The consumer's window.
  struct alignas(64) Window {
    std::uint64_t pops = 0;
    std::uint64_t waits = 0;      // waits over kWaitUs
    double step_us = 0;           // the trainer's time between pops, waits excluded
    std::uint64_t decode_ns = 0;  // the decoders' counters at the window's start
    std::uint64_t decodes = 0;
  } window_;
  std::uint64_t pops_since_change_ = 0;

  mutable Mutex note_mutex_;
  std::string note_ TF_GUARDED_BY(note_mutex_);
};

}  // namespace tokenfeed
