// Stopping a long command (prepare, prepare-text) on SIGINT, SIGTERM or SIGHUP, and the
// figures its progress and summary lines share.
//
// The handler only records the signal (lock-free atomics are async-signal-safe); the run
// polls stop_requested(), cleans up, and the command then ends by the same signal
// (die_by_signal), so that a calling shell or make sees an interrupted child. A second signal
// takes the default action at once.
#pragma once

#include <signal.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace tokenfeed::cli {

// Installs the handler for its lifetime; a signal the process was started ignoring (nohup,
// background jobs) stays ignored.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;

 private:
  static constexpr std::size_t kSignals = 3;
  std::array<struct sigaction, kSignals> previous_{};
  std::array<bool, kSignals> installed_{};
};

// Set once a stop signal arrived.
const std::atomic<bool>& stop_requested() noexcept;
// The signal that arrived, 0 when none.
int stop_signal() noexcept;
// "SIGINT", "SIGTERM" or "SIGHUP".
const char* stop_signal_name(int signal_number) noexcept;

// Ends the process by `signal_number` with its default action (after the caller cleaned up).
[[noreturn]] void die_by_signal(int signal_number);

std::string human_bytes(double bytes);  // "12.3 MB"
std::string human_count(double n);      // "1.23 M"
std::string plural(std::uint64_t n, const char* noun);

}  // namespace tokenfeed::cli
