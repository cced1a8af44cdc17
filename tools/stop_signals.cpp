#include "stop_signals.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace tokenfeed::cli {
namespace {

constexpr std::array<int, 3> kStopSignals = {SIGINT, SIGTERM, SIGHUP};
std::atomic<bool> g_stop_requested{false};
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

void on_stop_signal(int signal_number) {
  g_stop_signal.store(signal_number, std::memory_order_relaxed);
  g_stop_requested.store(true, std::memory_order_relaxed);
}

}  // namespace

StopSignalScope::StopSignalScope() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = static_cast<int>(SA_RESETHAND | SA_RESTART);  // SA_RESETHAND is 0x80000000u
  for (std::size_t i = 0; i < kStopSignals.size(); ++i) {
    ::sigaction(kStopSignals[i], nullptr, &previous_[i]);
    if (previous_[i].sa_handler == SIG_IGN) continue;
    installed_[i] = ::sigaction(kStopSignals[i], &action, nullptr) == 0;
  }
}

StopSignalScope::~StopSignalScope() {
  for (std::size_t i = 0; i < kStopSignals.size(); ++i) {
    if (installed_[i]) ::sigaction(kStopSignals[i], &previous_[i], nullptr);
  }
}

const std::atomic<bool>& stop_requested() noexcept { return g_stop_requested; }
int stop_signal() noexcept { return g_stop_signal.load(std::memory_order_relaxed); }

const char* stop_signal_name(int signal_number) noexcept {
  return signal_number == SIGINT ? "SIGINT" : signal_number == SIGTERM ? "SIGTERM" : "SIGHUP";
}

void die_by_signal(int signal_number) {
  std::cout.flush();
  std::fflush(nullptr);
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  ::sigaction(signal_number, &action, nullptr);
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, signal_number);
  ::sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
  ::raise(signal_number);
  std::_Exit(128 + signal_number);  // not reached: the default action of these signals ends the process
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 4) {
    bytes /= 1000.0;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof text, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return text;
}

std::string human_count(double n) {
  char text[32];
  if (n >= 1e9) {
    std::snprintf(text, sizeof text, "%.2f G", n / 1e9);
  } else if (n >= 1e6) {
    std::snprintf(text, sizeof text, "%.2f M", n / 1e6);
  } else if (n >= 1e3) {
    std::snprintf(text, sizeof text, "%.1f k", n / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.0f ", n);
  }
  return text;
}

std::string plural(std::uint64_t n, const char* noun) { return std::to_string(n) + " " + noun + (n == 1 ? "" : "s"); }

}  // namespace tokenfeed::cli
