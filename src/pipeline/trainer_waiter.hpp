// TrainerWaiter: how a trainer that found no batch ready sleeps, and how the collator and
// stop() wake it. The trainer's half of the pipeline's hand-over; the producer's half is
// pipeline/batch_producer.hpp.
//
// A trainer that must sleep (it found the ring empty and had no core to spin on, or spun in
// vain) asks to be woken for several batches at once (want()), not for one: a wake-up costs
// a futex call on the collator's side and, on a machine whose cores all decode, a context
// switch that interrupts a decoder, so one wake per batch would cost production far more
// than the trainer saves by starting a batch earlier. It then takes those batches without
// waiting.
//
// No lost wake-up: the trainer stores its request (want), then reads the signal (seen()),
// then looks at the ring; the collator pushes, then calls pushed(), which bumps the signal
// and then reads the request, all seq_cst. Either the trainer's read of the signal follows
// the bump, and then it sees the push; or the bump follows it, and then the collator sees
// the request and wakes the trainer, whose sleep on `seen` cannot miss a bump after it.
// A sleep with a deadline waits on a condition variable instead, since an atomic wait has
// no timeout; a wake takes its mutex only while such a sleeper exists (the seq_cst bump and
// load of the sleeper count, against the sleeper's seq_cst increment and load of the
// signal, make sure one side sees the other).
//
// Thread-safety: want(), seen(), sleep() and sleep_until() belong to the trainer's thread;
// pushed() to the collator (one call at a time); interrupt() to any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>

#include "util/thread_annotations.hpp"

namespace tokenfeed {

class TrainerWaiter {
 public:
  using Clock = std::chrono::steady_clock;

  // The trainer wants to be woken once the ring holds `batches` (>= 1; 1 while it does not
  // sleep). Set before seen().
  void want(std::size_t batches) noexcept { wake_at_.store(batches, std::memory_order_seq_cst); }
  // The signal as it is now: read before looking at the ring, then passed to a sleep.
  std::uint32_t seen() const noexcept { return signal_.load(std::memory_order_seq_cst); }
  // Sleeps until the signal moves past `seen` (returns at once if it already has).
  void sleep(std::uint32_t seen) const noexcept { signal_.wait(seen, std::memory_order_acquire); }
  // Sleeps until the signal moves past `seen` or `deadline` passes.
  void sleep_until(std::uint32_t seen, Clock::time_point deadline);

  // The collator pushed batches: the ring holds `ready`. Wakes a sleeping trainer when that
  // is what it asked for, or `urgent` (a failed batch, which it must be handed at once).
  void pushed(std::size_t ready, bool urgent) noexcept;
  // Wakes a sleeping trainer whatever it asked for, so that it looks again (stop()).
  void interrupt() noexcept;

 private:
  void notify() noexcept;

  // Bumped after every push into the ring and by interrupt(); the trainer sleeps on it.
  std::atomic<std::uint32_t> signal_{0};
  std::atomic<std::size_t> wake_at_{1};
  // The deadline sleep's condition variable; the mutex only orders the sleeper's check
  // of the signal against a wake (it guards no data of its own).
  Mutex timed_mutex_;
  std::condition_variable timed_cv_;
  std::atomic<std::uint32_t> timed_waiters_{0};
};

}  // namespace tokenfeed
