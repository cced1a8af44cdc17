// How long this machine's caches keep what a thread does not touch for a while: the time
// per cache line of re-reading a working set the thread read last `idle` microseconds ago,
// while it spun on its CPU in between (a trainer's step) or slept (a waiting loader). Each
// read is a dependent load in a random order over whole lines (no prefetcher helps), so a
// line costs what the level holding it costs. The same lines flushed to memory (clflush)
// give memory's figure in the same run.
//
// Why it is here: a call that takes ~1 us back to back takes several times that after a
// 2 ms step, from Python even np.empty(3) (perf/RESULTS_by_hand.md, "What a step's idle
// time costs"); this shows whether the machine, not the code, drops the caller's lines.
// Usage: bench_idle_cache [--rounds N] [--sizes-kib 32,256,1024] [--idle-us 0,100,...] [--json]
#include <emmintrin.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <vector>

#include "bench_common.hpp"

namespace {

using tokenfeed::perf::Clock;
using tokenfeed::perf::median;
using tokenfeed::perf::spin_for;

struct alignas(64) Line {
  std::size_t next;
  char pad[64 - sizeof(std::size_t)];
};

// A working set of `kib` KiB whose lines form one random cycle.
std::vector<Line> random_cycle(std::size_t kib, std::uint64_t seed) {
  const std::size_t n = std::max<std::size_t>(2, kib * 1024 / sizeof(Line));
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin() + 1, order.end(), std::mt19937_64(seed));
  std::vector<Line> lines(n);
  for (std::size_t i = 0; i < n; ++i) lines[order[i]].next = order[(i + 1) % n];
  return lines;
}

// Walks the whole cycle once; returns ns per line.
double chase_ns_per_line(const std::vector<Line>& lines) {
  const auto start = Clock::now();
  std::size_t p = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) p = lines[p].next;
  const auto end = Clock::now();
  asm volatile("" : : "r"(p));  // keep the walk
  return std::chrono::duration<double, std::nano>(end - start).count() / static_cast<double>(lines.size());
}

void sleep_for(std::chrono::microseconds us) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(us.count() / 1'000'000);
  ts.tv_nsec = static_cast<long>(us.count() % 1'000'000) * 1000;
  nanosleep(&ts, nullptr);
}

void flush(const std::vector<Line>& lines) {
  for (const Line& l : lines) _mm_clflush(&l);
  _mm_mfence();
}

enum class Idle { spin, sleep, flushed };

// The median ns per line over `rounds` walks, each after the set was walked (warm) and the
// thread then spent `idle` as `how` says.
double re_read_ns(const std::vector<Line>& lines, Idle how, std::chrono::microseconds idle, int rounds) {
  std::vector<double> ns;
  for (int r = 0; r < rounds; ++r) {
    chase_ns_per_line(lines);
    if (how == Idle::spin) spin_for(static_cast<double>(idle.count()));
    if (how == Idle::sleep) sleep_for(idle);
    if (how == Idle::flushed) flush(lines);
    ns.push_back(chase_ns_per_line(lines));
  }
  return median(ns);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "How long the caches keep a working set a thread leaves idle: ns per line re-read after spinning or "
      "sleeping, against the same lines flushed to memory"};
  int rounds = 200;
  std::vector<std::size_t> sizes_kib{32, 256, 1024};
  std::vector<int> idle_us{0, 100, 500, 2000, 10000};
  bool json = false;
  app.add_option("--rounds", rounds, "Re-reads per cell (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--sizes-kib", sizes_kib, "Working-set sizes, KiB")->delimiter(',')->check(CLI::PositiveNumber);
  app.add_option("--idle-us", idle_us, "Idle times, microseconds")->delimiter(',')->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "Print one JSON object");
  CLI11_PARSE(app, argc, argv);

  nlohmann::json rows = nlohmann::json::array();
  for (const std::size_t kib : sizes_kib) {
    const std::vector<Line> lines = random_cycle(kib, kib);
    const double memory_ns = re_read_ns(lines, Idle::flushed, {}, rounds);
    for (const int us : idle_us) {
      const std::chrono::microseconds idle(us);
      // The two ways of idling alternate by cell, so that the host's load falls on both.
      rows.push_back({{"kib", kib},
                      {"idle_us", us},
                      {"spin_ns", re_read_ns(lines, Idle::spin, idle, rounds)},
                      {"sleep_ns", re_read_ns(lines, Idle::sleep, idle, rounds)},
                      {"memory_ns", memory_ns}});
    }
  }
  if (json) {
    std::cout << nlohmann::json{{"rounds", rounds}, {"ns_per_line", rows}}.dump() << "\n";
    return 0;
  }
  std::cout << "ns per line re-read (median of " << rounds << "), by working set and idle time\n"
            << "   KiB  idle_us   spinning   sleeping   flushed (memory)\n";
  for (const nlohmann::json& r : rows) {
    std::printf("%6zu %8d %10.1f %10.1f %10.1f\n", r["kib"].get<std::size_t>(), r["idle_us"].get<int>(),
                r["spin_ns"].get<double>(), r["sleep_ns"].get<double>(), r["memory_ns"].get<double>());
  }
  return 0;
}
