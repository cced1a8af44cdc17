// Admitter: a small thread that sends admissions (permission for more batches to start)
// to the pipeline's limiter on the trainer's behalf.
//
// Why a thread: a limiter decrement may wake a sleeping decoder, which costs TBB tens of
// microseconds on the calling thread. The trainer hands its admissions here instead and
// pays at most a futex wake, and only when the admitter sleeps (perf/RESULTS.md has the
// measurements).
//
// Thread-safety: hand_off() is called by one thread (the trainer's); stop() by any thread,
// idempotently. The destructor stops and joins.
#pragma once

#include <atomic>
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

  // Adds `n` admissions for the thread to send (n > 0, far below 2^31 in all).
  void hand_off(std::uint32_t n) noexcept;
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
