// TrainerPace: how fast the trainer takes batches, so that the admitter can wake on its own
// timer before the ring runs low, instead of being woken by the trainer.
//
// Why: the trainer's pop() otherwise wakes the sleeping admitter once per refill, and a
// futex wake of a thread asleep on another CPU costs the caller the system call and an
// inter-processor interrupt: on a virtual machine 10-100 us (perf/RESULTS_by_hand.md), which
// a trainer taking one batch in ten with it sees as its get_batch p99. A trainer slow
// enough (a step of kMinStep or more) is predictable: the admitter, after each send, sleeps
// for the time the trainer takes to bring the ring down near its low mark
// (pause_for), and the trainer only hands its admissions over (an atomic add).
//
// The step is a moving average (1/8 weight per pop) of the time from one pop returning to
// the next being called, waits excluded; a step over kOutlier times the average (an
// evaluation, a checkpoint) counts as kOutlier times it, so that one pause does not make
// the admitter oversleep for the next many pops. An admitter that wakes too late costs
// nothing new: the trainer wakes it at the ring's low mark, as without a pace.
//
// Thread-safety: popped() and returned() belong to the one thread that pops; step(),
// paced() and pause_for() may be called by any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

namespace tokenfeed {

class TrainerPace {
 public:
  using Clock = std::chrono::steady_clock;

  // Steps from this one on are paced: the admitter's timer is worth it (a pause of several
  // such steps is far longer than a wake-up's cost and the kernel's 50 us timer slack).
  static constexpr std::chrono::nanoseconds kMinStep = std::chrono::microseconds(50);
  static constexpr std::int64_t kOutlier = 4;
  // The share of the predicted time the admitter sleeps: it wakes before the trainer gets
  // there even when the trainer's steps shorten a little.
  static constexpr double kMargin = 0.9;

  // The trainer called pop() at `called`: returns the step that ended (since the last
  // returned(), uncapped; nullopt for the first pop), which auto depth also reads.
  std::optional<std::chrono::nanoseconds> popped(Clock::time_point called) noexcept {
    if (!returned_once_) return std::nullopt;
    const auto step = std::chrono::duration_cast<std::chrono::nanoseconds>(called - last_return_);
    const std::int64_t sample = step.count();
    const std::int64_t mean = mean_ns_.load(std::memory_order_relaxed);
    const std::int64_t capped = mean > 0 ? std::min(sample, kOutlier * mean) : sample;
    mean_ns_.store(mean > 0 ? mean + (capped - mean) / 8 : capped, std::memory_order_relaxed);
    return step;
  }
  // pop() returned a batch to the trainer at `when`: its step starts.
  void returned(Clock::time_point when) noexcept {
    last_return_ = when;
    returned_once_ = true;
  }

  // The trainer's mean step (0 before two pops).
  std::chrono::nanoseconds step() const noexcept {
    return std::chrono::nanoseconds(mean_ns_.load(std::memory_order_relaxed));
  }
  bool paced() const noexcept { return step() >= kMinStep; }

  // How long the trainer takes for `pops` more pops, less the margin: nullopt when it is not
  // paced or pops is 0.
  std::optional<std::chrono::nanoseconds> pause_for(std::size_t pops) const noexcept {
    const std::chrono::nanoseconds s = step();
    if (pops == 0 || s < kMinStep) return std::nullopt;
    return std::chrono::nanoseconds(
        static_cast<std::int64_t>(kMargin * static_cast<double>(s.count()) * static_cast<double>(pops)));
  }

 private:
  std::atomic<std::int64_t> mean_ns_{0};
  Clock::time_point last_return_{};  // the popping thread's
  bool returned_once_ = false;
};

}  // namespace tokenfeed
