// Admitter: a small thread that sends admissions (permission for more batches to start)
// to the pipeline's limiter on the trainer's behalf.
//
// Why a thread: a limiter decrement may wake a sleeping decoder, which costs TBB tens of
// microseconds on the calling thread. The trainer hands its admissions here instead and
// pays at most a futex wake, and only when it asks for one (perf/RESULTS.md has the
// measurements).
//
// Wakes: a hand-off may leave the thread asleep (wake = false: the ring still holds enough
// batches that the admissions are not needed at once). The thread then finds them on its
// own: it sleeps with a timeout, kActivePoll while it sent something in the last
// kIdleAfter, else kIdlePoll. A trainer slower than production thus pays no syscall while
// the ring is comfortably full, for at most a thousand short wake-ups a second of this
// thread while batches flow, twenty when they stop. Each wake-up is a context switch, so
// this is a large share of the loader's cost beside a slow trainer.
//
// Thread-safety: hand_off() is called by one thread (the trainer's); stop() by any thread,
// idempotently. The destructor stops and joins.
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
  // `wake`, wakes the thread now (a futex wake), else it finds them within kActivePoll
  // (kIdlePoll when it sent nothing for kIdleAfter).
  void hand_off(std::uint32_t n, bool wake) noexcept;

  static constexpr std::chrono::nanoseconds kActivePoll = std::chrono::milliseconds(1);
  static constexpr std::chrono::nanoseconds kIdlePoll = std::chrono::milliseconds(50);
  static constexpr std::chrono::nanoseconds kIdleAfter = std::chrono::milliseconds(100);
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
