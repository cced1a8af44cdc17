// Admitter: a small thread that sends admissions (permission for more batches to start)
// to the pipeline's limiter on the trainer's behalf.
//
// Why a thread: a limiter decrement may wake a sleeping decoder, which costs TBB tens of
// microseconds on the calling thread. The trainer hands its admissions here instead and
// pays at most a futex wake, and only when it asks for one (perf/RESULTS.md has the
// measurements).
//
// Wakes: a hand-off may leave the thread asleep (wake = false: the ring still holds enough
// batches that the admissions are not needed yet). The trainer then wakes it later, once,
// when the ring runs low (wake()), or takes them back and sends them itself when it finds
// the ring empty and is about to wait anyway (reclaim()). The thread does not poll for
// them: beside a slow trainer (a 2 ms step) it wakes once per hand-off, not every
// millisecond, and each wake-up is a context switch, most of what a waiting loader costs.
// It only looks on its own every kBackstop, so that admissions left with it while the
// trainer is away (an evaluation, a checkpoint) still refill the ring.
//
// Thread-safety: hand_off(), wake(), holding() and reclaim() are called by one thread (the
// trainer's); stop() by any thread, idempotently. The destructor stops and joins.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>

namespace tokenfeed {

class Admitter {
 public:
  // Starts the thread, which calls `send(n)` with the admissions handed off since its last
  // call, until stop(). Throws std::system_error when no thread can be had.
  explicit Admitter(std::function<void(long long)> send);
  ~Admitter();
  Admitter(const Admitter&) = delete;
  Admitter& operator=(const Admitter&) = delete;

  // Adds `n` admissions for the thread to send (n > 0, far below 2^31 in all); with
  // `wake`, wakes the thread now (a futex wake), else they wait for wake(), reclaim() or
  // the thread's kBackstop look.
  void hand_off(std::uint32_t n, bool wake) noexcept;
  // Whether admissions handed off are still unsent.
  bool holding() const noexcept { return (admissions_.load(std::memory_order_acquire) & ~kStop) != 0; }
  // Wakes the thread to send what it holds (a futex wake).
  void wake() noexcept;
  // Takes back the admissions not yet sent, for the caller to send: each admission is sent
  // exactly once, by the thread or by the caller. 0 after stop().
  std::uint32_t reclaim() noexcept;

  static constexpr std::chrono::nanoseconds kBackstop = std::chrono::milliseconds(50);
  // Makes the thread return; it sends nothing more. Does not wait.
  void stop() noexcept;

 private:
  void run();

  // Admissions handed off, plus kStop once stopped.
  static constexpr std::uint32_t kStop = 1U << 31;
  std::atomic<std::uint32_t> admissions_{0};
  std::function<void(long long)> send_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace tokenfeed
