// Loader.stats(): the figures of `tokenfeed bench --json` (tools/cmd_bench.cpp), under its
// names and with its meanings, for get_batch as the Python trainer sees it, per split. The
// stall threshold, the CPU formulas, RssAnon and the percentiles are src/measure/'s, as
// bench's are.
//
// A call's duration runs from the method's entry to its return with the GIL held again (so
// it includes waiting for the loader's mutex and for the GIL); a step "waited for data"
// when its batch's wait_us() is over 50 us; a call is "slow" when it took over 50 us for
// any reason. The measurement starts with the first call after the loader opened or after
// reset_stats(), whose calls count as warm-up.
//
// Thread-safety: plain values; the Loader binding guards each split's CallTiming with a
// mutex of its own.
#pragma once

#include <time.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nanobind/nanobind.h>

#include "tokenfeed/batch.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed_python {

// The calls of one split measured so far.
struct CallTiming {
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kWindow = 8192;  // calls kept for the percentiles
  std::vector<float> recent_us;                 // the last kWindow durations (a ring once full)
  std::size_t next = 0;
  std::uint64_t warmup = 0;  // calls made before the last reset_stats()
  std::uint64_t calls = 0;
  std::uint64_t data_waits = 0;  // batches whose wait_us() > measure::kStallUs
  std::uint64_t slow_calls = 0;  // calls that took > measure::kStallUs
  std::uint64_t waits = 0;       // batches that found the ring empty (wait_us() > 0)
  double total_wait_us = 0, max_wait_us = 0;
  double sum_us = 0, max_us = 0;
  std::uint64_t positions = 0, real_positions = 0;
  Clock::time_point start, last_return;  // the first measured call's start, the last one's return
  // CPU time at the first measured call: the whole process's, and the calling (trainer's)
  // thread's through its CPU clock, which stats() reads from any thread.
  double process_cpu0 = 0, trainer_cpu0 = 0;
  clockid_t trainer_clock{};
  bool has_trainer_clock = false;

  // One call, from `call_start` to `call_return`, that returned `b`; on the calling thread.
  void record(Clock::time_point call_start, Clock::time_point call_return, const tokenfeed::Batch& b);
  // Starts a new measurement; the calls so far become warm-up.
  void reset();
};

// What stats() reads from the C++ loader, under the binding's loader mutex.
struct SplitSnapshot {
  tokenfeed::SplitStats stats;
  tokenfeed::SplitInfo info;
  std::int64_t batch_size = 0, block_size = 0;
  std::int64_t prefetch_depth_setting = 0;  // 0: auto
  std::string dataset_mode;
};
SplitSnapshot snapshot_split(const tokenfeed::Loader& loader, const std::string& split);

// The stats() dict of `split`: bench's figures over the calls of `timing`, plus the waits
// behind stall_fraction, the packing, and the split's facts. Not reported: bench's
// `config` and `consumer_us` (its own run's parameters).
nanobind::dict stats_dict(const std::string& split, const SplitSnapshot& s, const CallTiming& t, double open_ms);

}  // namespace tokenfeed_python
