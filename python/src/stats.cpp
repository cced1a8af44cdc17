#include "stats.hpp"

#include <pthread.h>

#include <algorithm>

#include <nanobind/stl/string.h>

#include "measure/measure.hpp"
#include "measure/nearest_rank.hpp"

namespace nb = nanobind;

namespace tokenfeed_python {
namespace {

using tokenfeed::measure::kStallUs;

double clock_seconds(clockid_t id) {
  timespec ts{};
  if (clock_gettime(id, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

void CallTiming::record(Clock::time_point call_start, Clock::time_point call_return, const tokenfeed::Batch& b) {
  const double us = std::chrono::duration<double, std::micro>(call_return - call_start).count();
  if (recent_us.size() < kWindow) {
    recent_us.push_back(static_cast<float>(us));
  } else {
    recent_us[next] = static_cast<float>(us);
    next = (next + 1) % kWindow;
  }
  if (calls == 0) {
    start = call_start;
    process_cpu0 = tokenfeed::measure::process_cpu_seconds();
    has_trainer_clock = pthread_getcpuclockid(pthread_self(), &trainer_clock) == 0;
    trainer_cpu0 = has_trainer_clock ? clock_seconds(trainer_clock) : 0;
  }
  last_return = call_return;
  ++calls;
  const double wait = b.wait_us();
  if (wait > kStallUs) ++data_waits;
  if (us > kStallUs) ++slow_calls;
  if (wait > 0) ++waits;
  total_wait_us += wait;
  max_wait_us = std::max(max_wait_us, wait);
  sum_us += us;
  max_us = std::max(max_us, us);
  positions += b.rows() * b.cols();
  real_positions += b.real_positions();
}

void CallTiming::reset() {
  const std::uint64_t done = warmup + calls;
  *this = CallTiming();
  warmup = done;
}

SplitSnapshot snapshot_split(const tokenfeed::Loader& loader, const std::string& split) {
  SplitSnapshot snap;
  snap.stats = loader.split_stats(split);
  snap.info = loader.split_info(split);
  snap.batch_size = loader.config().batch_size;
  snap.block_size = loader.config().block_size;
  snap.prefetch_depth_setting = loader.config().prefetch_depth;
  snap.dataset_mode = tokenfeed::to_string(loader.config().dataset_mode);
  return snap;
}

nb::dict stats_dict(const std::string& split, const SplitSnapshot& s, const CallTiming& t, double open_ms) {
  using Clock = CallTiming::Clock;
  const double seconds = t.calls > 0 ? std::chrono::duration<double>(t.last_return - t.start).count() : 0.0;
  const double n = static_cast<double>(t.calls);
  const double per_batch = static_cast<double>(s.batch_size * s.block_size);
  const auto fraction = [&](std::uint64_t count) { return t.calls > 0 ? static_cast<double>(count) / n : 0.0; };
  nb::dict d;
  d["split"] = split;
  d["dataset_mode"] = s.dataset_mode;
  d["batch_size"] = s.batch_size;
  d["block_size"] = s.block_size;
  d["mask"] = s.info.mask;
  d["batches"] = t.calls;
  d["warmup"] = t.warmup;
  d["seconds"] = seconds;
  d["batches_per_s"] = seconds > 0 ? n / seconds : 0.0;
  d["tokens_per_s"] = seconds > 0 ? n * per_batch / seconds : 0.0;
  d["real_tokens_per_s"] = seconds > 0 ? static_cast<double>(t.real_positions) / seconds : 0.0;
  nb::dict latency;
  std::vector<float> sorted_us = t.recent_us;
  std::sort(sorted_us.begin(), sorted_us.end());
  latency["p50"] = tokenfeed::nearest_rank(sorted_us, 0.50);
  latency["p99"] = tokenfeed::nearest_rank(sorted_us, 0.99);
  latency["max"] = t.max_us;
  latency["mean"] = t.calls > 0 ? t.sum_us / n : 0.0;
  d["get_batch_us"] = latency;
  d["stall_fraction"] = fraction(t.data_waits);
  d["slow_call_fraction"] = fraction(t.slow_calls);
  d["open_ms"] = open_ms;
  d["prefetch_depth"] = s.stats.prefetch_depth;
  d["prefetch_depth_setting"] =
      s.prefetch_depth_setting == 0 ? std::string("auto") : std::to_string(s.prefetch_depth_setting);
  d["decode_threads"] = s.stats.decode_threads;
  d["rss_anon_mb"] = tokenfeed::measure::rss_anon_mb();
  // CPU since the first measured call, up to now (as bench: every thread per batch, and
  // the loader's background threads' share of one core, all threads but the trainer's).
  tokenfeed::measure::CpuUse cpu;
  double wall_s = 0;
  if (t.calls > 0) {
    cpu.process_s = tokenfeed::measure::process_cpu_seconds() - t.process_cpu0;
    cpu.trainer_s = t.has_trainer_clock ? clock_seconds(t.trainer_clock) - t.trainer_cpu0 : 0;
    wall_s = std::chrono::duration<double>(Clock::now() - t.start).count();
  }
  d["cpu_us_per_batch"] = cpu.us_per_batch(n);
  d["loader_threads_core_fraction"] = cpu.background_core_fraction(wall_s);
  // Beyond bench: the waits behind stall_fraction, the packing, and the split's facts.
  d["waits"] = t.waits;
  d["total_wait_us"] = t.total_wait_us;
  d["max_wait_us"] = t.max_wait_us;
  d["packing_efficiency"] =
      t.positions > 0 ? static_cast<double>(t.real_positions) / static_cast<double>(t.positions) : 0.0;
  d["episodes"] = s.info.episodes;
  d["kept_episodes"] = s.info.kept_episodes;
  d["windows"] = s.info.windows;
  d["tokens"] = s.info.tokens;
  d["batches_per_epoch"] = s.info.batches_per_epoch;
  return d;
}

}  // namespace tokenfeed_python
