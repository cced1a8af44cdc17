// Shared pieces of the perf drivers: a trainer stand-in that calls get_batch and spins for
// a fixed step, latency percentiles, RssAnon, and config overrides.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "measure/measure.hpp"
#include "measure/nearest_rank.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed::perf {

using Clock = std::chrono::steady_clock;

using measure::kStallUs;
using measure::rss_anon_mb;
using measure::spin_for;

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return nearest_rank(v, 0.5);
}

struct ConsumerResult {
  std::uint64_t batches = 0;
  double seconds = 0;
  double batches_per_s = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;
  double stall_fraction = 0;
  std::uint64_t depth_used = 0;
  std::uint64_t threads_used = 0;  // decode threads in effect (decode_threads 0 resolved)
  std::uint64_t real_positions = 0;
  measure::CpuUse cpu;  // over the measured batches
  double cpu_us_per_batch() const noexcept { return cpu.us_per_batch(static_cast<double>(batches)); }
  // The same without the consumer's thread: the loader's background threads only.
  double loader_cpu_us_per_batch() const noexcept { return cpu.background_us_per_batch(static_cast<double>(batches)); }
  // The loader's background threads' share of one core while the consumer ran.
  double loader_threads_core_fraction() const noexcept { return cpu.background_core_fraction(seconds); }
};

// The trainer stand-in: `warmup` batches, then batches until both `min_batches` and
// `seconds` are reached (or `max_batches`), reading `reads` (the fields' spans, no values)
// and spinning `step_us` after each.
inline ConsumerResult run_consumer(Loader& loader, double step_us, std::uint64_t warmup, double seconds,
                                   std::uint64_t min_batches, std::uint64_t max_batches,
                                   measure::TrainerReads reads = measure::TrainerReads::contract) {
  for (std::uint64_t i = 0; i < warmup; ++i) {
    measure::read_fields(loader.get_batch("train"), reads);
    spin_for(step_us);
  }
  std::vector<double> lat;
  lat.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(max_batches, 1 << 22)));
  ConsumerResult r;
  std::uint64_t data_waits = 0;
  const auto start = Clock::now();
  const double process_cpu0 = measure::process_cpu_seconds(), trainer_cpu0 = measure::thread_cpu_seconds();
  while (true) {
    const auto t0 = Clock::now();
    Batch b = loader.get_batch("train");
    const auto t1 = Clock::now();
    lat.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    if (b.wait_us() > kStallUs) ++data_waits;
    r.real_positions += b.real_positions();
    measure::read_fields(b, reads);
    b.release();
    spin_for(step_us);
    ++r.batches;
    if (r.batches >= max_batches) break;
    if (r.batches >= min_batches && std::chrono::duration<double>(Clock::now() - start).count() >= seconds) break;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.cpu = {measure::process_cpu_seconds() - process_cpu0, measure::thread_cpu_seconds() - trainer_cpu0};
  r.batches_per_s = static_cast<double>(r.batches) / r.seconds;
  r.stall_fraction = static_cast<double>(data_waits) / static_cast<double>(lat.size());
  std::sort(lat.begin(), lat.end());
  r.p50_us = nearest_rank(lat, 0.5);
  r.p99_us = nearest_rank(lat, 0.99);
  r.max_us = lat.back();
  r.depth_used = loader.split_stats("train").prefetch_depth;
  r.threads_used = loader.split_stats("train").decode_threads;
  return r;
}

// Splits "a,b,c".
inline std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    if (end > begin) out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

}  // namespace tokenfeed::perf
