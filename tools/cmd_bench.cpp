// `tokenfeed bench`: a trainer stand-in that calls get_batch in a loop, optionally spends
// a fixed amount of CPU per step, and reports how fast batches came and how long the
// trainer's thread waited for them.
//
// Figures: batches/s, tokens/s (batch_size x block_size positions per batch) and real
// tokens/s (positions holding episode or window tokens), get_batch latency on the
// consumer's thread (p50, p99, max, mean, in microseconds), the fraction of steps that
// waited for data (get_batch found no batch ready and waited over 50 us: Batch::wait_us),
// the fraction of get_batch calls that took over 50 us for any reason (waiting for data,
// or the thread being descheduled), the time to open the dataset,
// the prefetch depth and decode threads in effect at the end, and anonymous memory
// (RssAnon: resident memory that is not file-backed, so the memory-mapped dataset does
// not count). --json prints exactly one JSON object on stdout and nothing else.
//
// The JSON object's fields named by the perf contract (perf/RESULTS.md), under exactly those names:
//   batches_per_s, tokens_per_s, get_batch_us {p50, p99, max}, stall_fraction, open_ms,
//   prefetch_depth, decode_threads, rss_anon_mb
// and extras beside them: real_tokens_per_s, get_batch_us.mean, slow_call_fraction,
// prefetch_depth_setting, and the run's parameters (config, split, dataset_mode,
// batch_size, block_size, mask, batches, warmup, consumer_us, seconds). These are also the
// names and shapes of the Python module's Loader.stats() (python/tests/test_api.py holds
// the two equal), so a field added here is added there too.
//
// --waits-json FILE also writes, to FILE, one JSON object saying when the steps that
// waited for data happened, to tell the unavoidable first reads of a cold start from
// waits spread through a run (perf/run.sh keeps it beside each run's JSON line):
//   count                  steps that waited > threshold_us (stall_fraction x batches)
//   first_steps, in_first_steps
//                          the first measured steps (auto depth's starting window, 16) and
//                          how many of them waited
//   tenths, wait_us_tenths, major_faults_tenths
//                          per tenth of the measured steps: waits, total microseconds
//                          waited, and the process's major page faults (reads from disk)
//   steps, steps_truncated the measured step index of each wait (the first 256)
//   longest                the 5 longest waits: {step, us}
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "measure/measure.hpp"
#include "measure/nearest_rank.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed::cli {
namespace {

using Clock = std::chrono::steady_clock;

using measure::kStallUs;
using measure::rss_anon_mb;
using measure::spin_for;

// `waits`: the first steps counted apart (auto depth's starting window), the most wait
// positions listed, and how many of the longest waits are named.
constexpr long kFirstSteps = 16;
constexpr std::size_t kMaxWaitSteps = 256;
constexpr std::size_t kLongestWaits = 5;
constexpr int kTenths = 10;

struct BenchOptions {
  std::string config;
  std::string split = "train";
  long batches = 2000;
  long warmup = 200;
  double consumer_us = 0;
  bool json = false;
  std::string waits_json;
};

// Major page faults of the whole process so far (reads that went to the disk).
long process_major_faults() {
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return usage.ru_majflt;
}

void bench(const BenchOptions& o) {
  if (o.json) set_log_handler(nullptr);  // stdout carries the JSON object only
  const auto open_start = Clock::now();
  Loader loader(load_config_file(o.config));
  const double open_ms = std::chrono::duration<double, std::milli>(Clock::now() - open_start).count();
  const Config& c = loader.config();
  if (!loader.has_split(o.split)) throw Error(ErrorKind::usage, "split '" + o.split + "' is not in the dataset");

  for (long i = 0; i < o.warmup; ++i) {
    Batch b = loader.get_batch(o.split);
    b.release();
    spin_for(o.consumer_us);
  }

  std::vector<double> latency_us;
  latency_us.reserve(static_cast<std::size_t>(o.batches));
  long data_waits = 0;  // steps whose batch was not ready: get_batch waited > kStallUs for it
  unsigned long long real_tokens = 0;
  // When the waits happened: per tenth of the measured steps, and each wait's step.
  std::array<long, kTenths> waits_tenth{}, faults_tenth{};
  std::array<double, kTenths> wait_us_tenth{};
  std::vector<long> wait_steps;
  std::vector<std::pair<double, long>> waits_by_length;  // (us, step) of every wait
  long in_first_steps = 0;
  int tenth = 0;
  long faults_at_tenth = process_major_faults();
  const auto tenth_of = [&](long i) {
    return static_cast<int>(std::min<long>(kTenths - 1, i * kTenths / std::max(o.batches, 1L)));
  };
  const auto start = Clock::now();
  for (long i = 0; i < o.batches; ++i) {
    if (tenth_of(i) != tenth) {  // a tenth boundary: the faults of the tenth just ended
      const long faults = process_major_faults();
      faults_tenth[static_cast<std::size_t>(tenth)] = faults - faults_at_tenth;
      faults_at_tenth = faults;
      tenth = tenth_of(i);
    }
    const auto t0 = Clock::now();
    Batch b = loader.get_batch(o.split);
    const auto t1 = Clock::now();
    latency_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    const double waited = b.wait_us();
    if (waited > kStallUs) {
      ++data_waits;
      ++waits_tenth[static_cast<std::size_t>(tenth)];
      wait_us_tenth[static_cast<std::size_t>(tenth)] += waited;
      if (i < kFirstSteps) ++in_first_steps;
      if (wait_steps.size() < kMaxWaitSteps) wait_steps.push_back(i);
      waits_by_length.emplace_back(waited, i);
    }
    real_tokens += b.real_positions();
    b.release();
    spin_for(o.consumer_us);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  faults_tenth[static_cast<std::size_t>(tenth)] = process_major_faults() - faults_at_tenth;
  std::sort(waits_by_length.begin(), waits_by_length.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (waits_by_length.size() > kLongestWaits) waits_by_length.resize(kLongestWaits);
  const SplitStats stats = loader.split_stats(o.split);
  const double rss = rss_anon_mb();

  const double slow_calls =
      static_cast<double>(std::count_if(latency_us.begin(), latency_us.end(), [](double us) { return us > kStallUs; }));
  const double stalls = static_cast<double>(data_waits);
  double mean_us = 0;
  for (const double us : latency_us) mean_us += us;
  mean_us /= static_cast<double>(std::max<std::size_t>(latency_us.size(), 1));
  std::sort(latency_us.begin(), latency_us.end());
  const double positions = static_cast<double>(c.batch_size * c.block_size);
  const double n = static_cast<double>(o.batches);

  nlohmann::json j;
  j["config"] = o.config;
  j["split"] = o.split;
  j["dataset_mode"] = to_string(c.dataset_mode);
  j["batch_size"] = c.batch_size;
  j["block_size"] = c.block_size;
  j["mask"] = loader.split_info(o.split).mask;
  j["batches"] = o.batches;
  j["warmup"] = o.warmup;
  j["consumer_us"] = o.consumer_us;
  j["seconds"] = seconds;
  j["batches_per_s"] = n / seconds;
  j["tokens_per_s"] = n * positions / seconds;
  j["real_tokens_per_s"] = static_cast<double>(real_tokens) / seconds;
  j["get_batch_us"] = {{"p50", nearest_rank(latency_us, 0.50)},
                       {"p99", nearest_rank(latency_us, 0.99)},
                       {"max", latency_us.empty() ? 0.0 : latency_us.back()},
                       {"mean", mean_us}};
  j["stall_fraction"] = stalls / n;
  j["slow_call_fraction"] = slow_calls / n;
  j["open_ms"] = open_ms;
  j["prefetch_depth"] = stats.prefetch_depth;
  j["prefetch_depth_setting"] = c.prefetch_depth == 0 ? std::string("auto") : std::to_string(c.prefetch_depth);
  j["decode_threads"] = stats.decode_threads;
  j["rss_anon_mb"] = rss;

  if (!o.waits_json.empty()) {
    nlohmann::json longest = nlohmann::json::array();
    for (const auto& [us, step] : waits_by_length) longest.push_back({{"step", step}, {"us", us}});
    const nlohmann::json w = {{"threshold_us", kStallUs},
                              {"count", data_waits},
                              {"batches", o.batches},
                              {"first_steps", std::min(kFirstSteps, o.batches)},
                              {"in_first_steps", in_first_steps},
                              {"tenths", waits_tenth},
                              {"wait_us_tenths", wait_us_tenth},
                              {"major_faults_tenths", faults_tenth},
                              {"steps", wait_steps},
                              {"steps_truncated", static_cast<std::size_t>(data_waits) > wait_steps.size()},
                              {"longest", longest}};
    std::ofstream out(o.waits_json);
    out << w.dump() << "\n";
    if (!out) throw Error(ErrorKind::io, "cannot write " + o.waits_json);
  }
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("bench     %s split=%s %lld x %lld mask=%s, %ld batches after %ld warm-up, consumer step %.0f us\n",
              o.config.c_str(), o.split.c_str(), static_cast<long long>(c.batch_size),
              static_cast<long long>(c.block_size), j["mask"].get<bool>() ? "on" : "off", o.batches, o.warmup,
              o.consumer_us);
  std::printf("rate      %.0f batches/s, %.4g tokens/s, %.4g real tokens/s\n", n / seconds, n * positions / seconds,
              static_cast<double>(real_tokens) / seconds);
  std::printf("get_batch p50 %.2f us, p99 %.2f us, max %.1f us, mean %.2f us; %.2f%% of steps waited > %.0f us for "
              "data, %.2f%% of calls took > %.0f us\n",
              nearest_rank(latency_us, 0.50), nearest_rank(latency_us, 0.99), j["get_batch_us"]["max"].get<double>(),
              mean_us, 100.0 * stalls / n, kStallUs, 100.0 * slow_calls / n, kStallUs);
  if (data_waits > 0) {
    std::string tenths;
    for (const long w : waits_tenth) tenths += (tenths.empty() ? "" : " ") + std::to_string(w);
    std::printf("waits     %ld steps waited for data: %ld in the first %ld steps; by tenth of the run: %s; longest "
                "%.0f us at step %ld\n",
                data_waits, in_first_steps, std::min(kFirstSteps, o.batches), tenths.c_str(),
                waits_by_length.front().first, waits_by_length.front().second);
  }
  std::printf("setup     opened in %.1f ms, prefetch_depth %llu (%s), decode_threads %llu, RssAnon %.1f MiB\n", open_ms,
              static_cast<unsigned long long>(stats.prefetch_depth), j["prefetch_depth_setting"].get<std::string>().c_str(),
              static_cast<unsigned long long>(stats.decode_threads), rss);
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Call get_batch in a loop like a trainer and report throughput, get_batch latency and memory");
  cmd->add_option("--config", options->config, "XML config file")->required()->check(CLI::ExistingFile);
  cmd->add_option("--split", options->split, "Split to read")->check(CLI::IsMember({"train", "val"}))->capture_default_str();
  cmd->add_option("--batches", options->batches, "Measured batches")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--warmup", options->warmup, "Batches taken before measuring")->check(CLI::NonNegativeNumber)->capture_default_str();
  cmd->add_option("--consumer-us", options->consumer_us, "CPU time spent per step on the consumer's thread, in microseconds")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object and nothing else on stdout");
  cmd->add_option("--waits-json", options->waits_json,
                  "Also write when the steps that waited for data happened (per tenth of the run, step indices, "
                  "the longest waits, major page faults) as one JSON object to this file");
  cmd->callback([options] { bench(*options); });
}

}  // namespace tokenfeed::cli
