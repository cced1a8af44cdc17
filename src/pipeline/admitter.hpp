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
// It looks on its own every kBackstop, so that admissions left with it while the trainer is
// away (an evaluation, a checkpoint) still refill the ring; and after each send, when the
// owner knows when the next admissions will be due (a trainer at a steady pace, see
// pipeline/trainer_pace.hpp), once at that time: the trainer then hands its admissions
// over without waking it, and pays no futex wake at all.
//
// With one decode thread, this thread is also the decoder: its send() runs the work it
// admits (see SplitPipeline's lone decoder), and join() asks it to run work admitted by
// the trainer. It is named (top -H, /proc/<pid>/task/*/comm) by what it does.
//
// Thread-safety: hand_off(), wake(), join(), holding() and reclaim() are called by one
// thread (the trainer's); stop() by any thread, idempotently. The destructor stops and
// joins.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <thread>

namespace tokenfeed {

class Admitter {
 public:
  // The thread's sleep after a send, before it looks on its own (capped at kBackstop);
  // nullopt: kBackstop. Called on the thread, after each send.
  using NextLook = std::function<std::optional<std::chrono::nanoseconds>()>;

  // Starts the thread, named `thread_name` (a string literal of at most 15 characters),
  // which calls `send(n)` with the admissions handed off since its last call, until
  // stop(). After a send it sleeps for `next_look()` (if given) before it looks on its own;
  // when that look finds nothing, for kBackstop. Throws std::system_error when no thread
  // can be had.
  Admitter(std::function<void(long long)> send, const char* thread_name, NextLook next_look = {});
  ~Admitter();
  Admitter(const Admitter&) = delete;
  Admitter& operator=(const Admitter&) = delete;

  // Adds `n` admissions for the thread to send (n > 0, far below 2^30 in all); with
  // `wake`, wakes the thread now (a futex wake), else they wait for wake(), reclaim() or
  // the thread's kBackstop look.
  void hand_off(std::uint32_t n, bool wake) noexcept;
  // Whether admissions handed off are still unsent.
  bool holding() const noexcept { return (admissions_.load(std::memory_order_acquire) & kCount) != 0; }
  // Wakes the thread to send what it holds (a futex wake).
  void wake() noexcept;
  // Wakes the thread and has it call send(0) even when it holds nothing: for a send that
  // also runs work already admitted by someone else (see SplitPipeline's lone decoder).
  void join() noexcept;
  // The futex wakes hand_off() and wake() made so far (what the trainer paid for).
  std::uint64_t wakes() const noexcept { return wakes_.load(std::memory_order_relaxed); }
  // Takes back the admissions not yet sent, for the caller to send: each admission is sent
  // exactly once, by the thread or by the caller. 0 after stop().
  std::uint32_t reclaim() noexcept;

  static constexpr std::chrono::nanoseconds kBackstop = std::chrono::milliseconds(50);
  // Makes the thread return; it sends nothing more. Does not wait.
  void stop() noexcept;

 private:
  void run();

  // Admissions handed off, plus kJoin while a join() is pending and kStop once stopped.
  static constexpr std::uint32_t kStop = 1U << 31;
  static constexpr std::uint32_t kJoin = 1U << 30;
  static constexpr std::uint32_t kCount = kJoin - 1;
  std::atomic<std::uint32_t> admissions_{0};
  std::atomic<std::uint64_t> wakes_{0};
  std::function<void(long long)> send_;
  const char* thread_name_;
  NextLook next_look_;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace tokenfeed
