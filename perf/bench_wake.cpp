// What waking a sleeping thread costs on this machine, the two ways a loader's admitter can
// be woken (perf/RESULTS_by_hand.md, "A paced trainer"):
//   - caller: a thread spinning a trainer's step wakes a thread asleep on a futex (the
//     trainer waking the admitter): the FUTEX_WAKE call's time on the caller, percentiles;
//   - woken: the sleeping thread's own CPU time per cycle of sleep + a fixed piece of work,
//     when its sleep ends by a timeout (the admitter's own timed look) against when another
//     thread wakes it (the trainer's wake), the work and the period being the same.
// Usage: bench_wake [--cycles N] [--period-us P] [--json]
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

double thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

void spin_until(Clock::time_point until) {
  while (Clock::now() < until) {
  }
}

// A fixed piece of work for the woken thread (a few tens of microseconds).
std::uint64_t work() {
  std::uint64_t x = 1;
  for (int i = 0; i < 20000; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  return x;
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

// The caller's cost of a futex wake of a sleeping thread, once per `period` of spinning.
std::vector<double> caller_wake_us(int cycles, std::chrono::microseconds period) {
  std::atomic<std::uint32_t> word{0};
  std::atomic<bool> stop{false};
  std::thread sleeper([&] {
    while (!stop.load()) {
      futex_wait(word, 0, std::chrono::seconds(1));
      word.store(0);
    }
  });
  std::vector<double> us;
  for (int i = 0; i < cycles; ++i) {
    spin_until(Clock::now() + period);  // the sleeper is asleep again by now
    const auto start = Clock::now();
    word.store(1);
    futex_wake(word);
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  stop.store(true);
  word.store(1);
  futex_wake(word);
  sleeper.join();
  return us;
}

// The woken thread's CPU per cycle: its sleep ends by timeout (by_timer) or by another
// thread's wake, then it works.
double woken_cpu_us(bool by_timer, int cycles, std::chrono::microseconds period) {
  std::atomic<std::uint32_t> word{0};
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> sink{0};
  double cpu = 0;
  std::thread sleeper([&] {
    const double start = thread_cpu_us();
    for (int i = 0; i < cycles; ++i) {
      if (by_timer) {
        futex_wait(word, 0, period);
      } else {
        while (word.load() == 0) futex_wait(word, 0, std::chrono::seconds(1));
        word.store(0);
      }
      sink.fetch_add(work());
    }
    cpu = thread_cpu_us() - start;
    done.store(true);
  });
  if (!by_timer) {
    auto next = Clock::now();
    while (!done.load()) {
      next += period;
      std::this_thread::sleep_until(next);
      word.store(1);
      futex_wake(word);
    }
  }
  sleeper.join();
  return cpu / cycles;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "What waking a sleeping thread costs: the caller's futex wake, and the woken thread's CPU by timer "
      "against by wake"};
  int cycles = 400;
  int period_us = 20000;
  bool json = false;
  app.add_option("--cycles", cycles, "Wakes per measurement")->check(CLI::PositiveNumber);
  app.add_option("--period-us", period_us, "Time between wakes, in microseconds")->check(CLI::PositiveNumber);
  app.add_flag("--json", json, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);
  const std::chrono::microseconds period(period_us);

  const std::vector<double> caller = caller_wake_us(cycles, std::min(period, std::chrono::microseconds(2000)));
  // Interleaved, so that a change in the host's load falls on both alike.
  std::vector<double> timer, wake;
  for (int round = 0; round < 4; ++round) {
    timer.push_back(woken_cpu_us(true, cycles / 4, period));
    wake.push_back(woken_cpu_us(false, cycles / 4, period));
  }
  nlohmann::json j;
  j["caller_wake_us"] = {
      {"p50", percentile(caller, 0.5)}, {"p90", percentile(caller, 0.9)}, {"p99", percentile(caller, 0.99)}};
  j["woken_cpu_us_per_cycle"] = {{"by_timer", percentile(timer, 0.5)}, {"by_wake", percentile(wake, 0.5)}};
  j["cycles"] = cycles;
  j["period_us"] = period_us;
  if (json) {
    std::cout << j.dump() << "\n";
  } else {
    std::cout << j.dump(2) << "\n";
  }
  return 0;
}
