// `tokenfeed bench`: a trainer stand-in that calls get_batch in a loop, optionally spends
// a fixed amount of CPU per step, and reports how fast batches came and how long the
// trainer's thread waited for them.
//
// Figures: batches/s, tokens/s (rows x block_size positions per batch) and real
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
// batch_size, block_size, mask, batches, warmup, consumer_us, reads, seconds). These are also the
// names and shapes of the Python module's Loader.stats() (python/tests/test_api.py holds
// the two equal), so a field added here is added there too.
//
// --reads says which fields the stand-in reads from each batch (their spans only, no
// values): contract (the default: tokens, labels, token_weights, position_ids, cu_seqlens)
// or view (x, y, mask), of the fields the config's `fields` chose: a trainer of the episode
// view is measured with fields=x,y,mask in the config (sft_episode then writes only those)
// and --reads view.
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
#include <map>
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
  measure::TrainerReads reads = measure::TrainerReads::contract;
  bool json = false;
  std::string waits_json;
};

// Major page faults of the whole process so far (reads that went to the disk).
long process_major_faults() {
  struct rusage usage {};
  if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return usage.ru_majflt;
}

// When the steps that waited for data happened (--waits-json), gathered step by step.
class WaitLog {
 public:
  explicit WaitLog(long batches) : batches_(batches), faults_at_tenth_(process_major_faults()) {}

  // Before measured step i: at a tenth boundary, closes the tenth that just ended.
  void begin_step(long i) {
    if (tenth_of(i) == tenth_) return;
    close_tenth();
    tenth_ = tenth_of(i);
  }
  // Measured step i waited `us` for its batch (over kStallUs).
  void wait(long i, double us) {
    ++count_;
    ++waits_tenth_[tenth()];
    wait_us_tenth_[tenth()] += us;
    if (i < kFirstSteps) ++in_first_steps_;
    if (steps_.size() < kMaxWaitSteps) steps_.push_back(i);
    by_length_.emplace_back(us, i);
  }
  // After the last step.
  void finish() {
    close_tenth();
    std::sort(by_length_.begin(), by_length_.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    if (by_length_.size() > kLongestWaits) by_length_.resize(kLongestWaits);
  }

  long count() const noexcept { return count_; }
  long in_first_steps() const noexcept { return in_first_steps_; }
  long first_steps() const noexcept { return std::min(kFirstSteps, batches_); }
  const std::array<long, kTenths>& per_tenth() const noexcept { return waits_tenth_; }
  // The longest wait: (us, step). REQUIRES: count() > 0 and finish() called.
  const std::pair<double, long>& longest() const { return by_length_.front(); }

  nlohmann::json to_json() const {
    nlohmann::json longest = nlohmann::json::array();
    for (const auto& [us, step] : by_length_) longest.push_back({{"step", step}, {"us", us}});
    return {{"threshold_us", kStallUs},
            {"count", count_},
            {"batches", batches_},
            {"first_steps", first_steps()},
            {"in_first_steps", in_first_steps_},
            {"tenths", waits_tenth_},
            {"wait_us_tenths", wait_us_tenth_},
            {"major_faults_tenths", faults_tenth_},
            {"steps", steps_},
            {"steps_truncated", static_cast<std::size_t>(count_) > steps_.size()},
            {"longest", longest}};
  }

 private:
  int tenth_of(long i) const {
    return static_cast<int>(std::min<long>(kTenths - 1, i * kTenths / std::max(batches_, 1L)));
  }
  std::size_t tenth() const noexcept { return static_cast<std::size_t>(tenth_); }
  void close_tenth() {
    const long faults = process_major_faults();
    faults_tenth_[tenth()] = faults - faults_at_tenth_;
    faults_at_tenth_ = faults;
  }

  const long batches_;
  long count_ = 0;
  long in_first_steps_ = 0;
  int tenth_ = 0;
  long faults_at_tenth_;
  std::array<long, kTenths> waits_tenth_{}, faults_tenth_{};
  std::array<double, kTenths> wait_us_tenth_{};
  std::vector<long> steps_;
  std::vector<std::pair<double, long>> by_length_;  // (us, step) of every wait, then the longest
};

// What the measured steps gave.
struct Measured {
  double seconds = 0;
  std::vector<double> latency_us;  // sorted
  double mean_us = 0;
  unsigned long long real_tokens = 0;
  double positions = 0;  // rows x cols of each measured batch (a shape_schedule varies them)
  measure::CpuUse cpu;   // over the measured steps
  WaitLog waits;
  explicit Measured(long batches) : waits(batches) {}
};

// Takes the warm-up batches, then the measured ones, spending the consumer's step after each.
Measured measure_steps(Loader& loader, const BenchOptions& o) {
  for (long i = 0; i < o.warmup; ++i) {
    Batch b = loader.get_batch(o.split);
    measure::read_fields(b, o.reads);
    b.release();
    spin_for(o.consumer_us);
  }
  Measured m(o.batches);
  m.latency_us.reserve(static_cast<std::size_t>(o.batches));
  const auto start = Clock::now();
  const double process_cpu0 = measure::process_cpu_seconds(), trainer_cpu0 = measure::thread_cpu_seconds();
  for (long i = 0; i < o.batches; ++i) {
    m.waits.begin_step(i);
    const auto t0 = Clock::now();
    Batch b = loader.get_batch(o.split);
    const auto t1 = Clock::now();
    m.latency_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    const double waited = b.wait_us();
    if (waited > kStallUs) m.waits.wait(i, waited);
    m.real_tokens += b.real_positions();
    const Config& c = loader.config();  // a context-parallel share counts its whole rows
    m.positions += static_cast<double>(b.rows()) * static_cast<double>(b.cols()) *
                   static_cast<double>(c.context_parallel_split ? c.context_parallel_size : 1);
    measure::read_fields(b, o.reads);
    b.release();
    spin_for(o.consumer_us);
  }
  m.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  m.cpu = {measure::process_cpu_seconds() - process_cpu0, measure::thread_cpu_seconds() - trainer_cpu0};
  m.waits.finish();
  for (const double us : m.latency_us) m.mean_us += us;
  m.mean_us /= static_cast<double>(std::max<std::size_t>(m.latency_us.size(), 1));
  std::sort(m.latency_us.begin(), m.latency_us.end());
  return m;
}

// The JSON object of the perf contract (see the top of this file).
nlohmann::json result_json(const BenchOptions& o, const Loader& loader, const Measured& m, double open_ms) {
  const Config& c = loader.config();
  const SplitStats stats = loader.split_stats(o.split);
  const double n = static_cast<double>(o.batches);
  const double slow_calls = static_cast<double>(
      std::count_if(m.latency_us.begin(), m.latency_us.end(), [](double us) { return us > kStallUs; }));
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
  j["reads"] = measure::to_string(o.reads);
  j["seconds"] = m.seconds;
  j["batches_per_s"] = n / m.seconds;
  j["tokens_per_s"] = m.positions / m.seconds;
  j["real_tokens_per_s"] = static_cast<double>(m.real_tokens) / m.seconds;
  j["get_batch_us"] = {{"p50", nearest_rank(m.latency_us, 0.50)},
                       {"p99", nearest_rank(m.latency_us, 0.99)},
                       {"max", m.latency_us.empty() ? 0.0 : m.latency_us.back()},
                       {"mean", m.mean_us}};
  j["stall_fraction"] = static_cast<double>(m.waits.count()) / n;
  j["slow_call_fraction"] = slow_calls / n;
  j["open_ms"] = open_ms;
  j["prefetch_depth"] = stats.prefetch_depth;
  j["prefetch_depth_setting"] = c.prefetch_depth == 0 ? std::string("auto") : std::to_string(c.prefetch_depth);
  j["decode_threads"] = stats.decode_threads;
  j["rss_anon_mb"] = rss_anon_mb();
  // CPU: per batch over every thread, and the loader's background threads' share of one
  // core (all threads but the trainer's) while the trainer ran its steps.
  j["cpu_us_per_batch"] = m.cpu.us_per_batch(n);
  j["loader_threads_core_fraction"] = m.cpu.background_core_fraction(m.seconds);
  return j;
}

// The human-readable report of the same figures.
void print_report(const BenchOptions& o, const nlohmann::json& j, const Measured& m) {
  const double n = static_cast<double>(o.batches);
  const double seconds = m.seconds;
  std::printf(
      "bench     %s split=%s %lld x %lld mask=%s, %ld batches after %ld warm-up, consumer step %.0f us, reads the %s\n",
      o.config.c_str(), o.split.c_str(), j["batch_size"].get<long long>(), j["block_size"].get<long long>(),
      j["mask"].get<bool>() ? "on" : "off", o.batches, o.warmup, o.consumer_us, measure::to_string(o.reads));
  std::printf("rate      %.0f batches/s, %.4g tokens/s, %.4g real tokens/s\n", n / seconds,
              j["tokens_per_s"].get<double>(), static_cast<double>(m.real_tokens) / seconds);
  std::printf(
      "get_batch p50 %.2f us, p99 %.2f us, max %.1f us, mean %.2f us; %.2f%% of steps waited > %.0f us for "
      "data, %.2f%% of calls took > %.0f us\n",
      nearest_rank(m.latency_us, 0.50), nearest_rank(m.latency_us, 0.99), j["get_batch_us"]["max"].get<double>(),
      m.mean_us, 100.0 * j["stall_fraction"].get<double>(), kStallUs, 100.0 * j["slow_call_fraction"].get<double>(),
      kStallUs);
  if (m.waits.count() > 0) {
    std::string tenths;
    for (const long w : m.waits.per_tenth()) tenths += (tenths.empty() ? "" : " ") + std::to_string(w);
    std::printf(
        "waits     %ld steps waited for data: %ld in the first %ld steps; by tenth of the run: %s; longest "
        "%.0f us at step %ld\n",
        m.waits.count(), m.waits.in_first_steps(), m.waits.first_steps(), tenths.c_str(), m.waits.longest().first,
        m.waits.longest().second);
  }
  std::printf("cpu       %.1f us per batch over all threads; the loader's background threads used %.1f%% of one core\n",
              j["cpu_us_per_batch"].get<double>(), 100.0 * j["loader_threads_core_fraction"].get<double>());
  std::printf("setup     opened in %.1f ms, prefetch_depth %llu (%s), decode_threads %llu, RssAnon %.1f MiB\n",
              j["open_ms"].get<double>(), j["prefetch_depth"].get<unsigned long long>(),
              j["prefetch_depth_setting"].get<std::string>().c_str(), j["decode_threads"].get<unsigned long long>(),
              j["rss_anon_mb"].get<double>());
}

void bench(const BenchOptions& o) {
  if (o.json) set_log_handler(nullptr);  // stdout carries the JSON object only
  const auto open_start = Clock::now();
  Loader loader(load_config_file(o.config));
  const double open_ms = std::chrono::duration<double, std::milli>(Clock::now() - open_start).count();
  if (!loader.has_split(o.split)) throw Error(ErrorKind::usage, "split '" + o.split + "' is not in the dataset");

  const Measured m = measure_steps(loader, o);
  const nlohmann::json j = result_json(o, loader, m, open_ms);
  if (!o.waits_json.empty()) {
    std::ofstream out(o.waits_json);
    out << m.waits.to_json().dump() << "\n";
    if (!out) throw Error(ErrorKind::io, "cannot write " + o.waits_json);
  }
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  print_report(o, j, m);
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
  cmd->add_option("--reads", options->reads,
                  "The fields the consumer reads: contract (tokens, labels, token_weights, position_ids, cu_seqlens) "
                  "or view (x, y, mask), of those the config's fields key chose")
      ->transform(CLI::CheckedTransformer(std::map<std::string, measure::TrainerReads>{
          {"contract", measure::TrainerReads::contract}, {"view", measure::TrainerReads::view}}))
      ->capture_default_str();
  cmd->add_flag("--json", options->json, "Print one JSON object and nothing else on stdout");
  cmd->add_option("--waits-json", options->waits_json,
                  "Also write when the steps that waited for data happened (per tenth of the run, step indices, "
                  "the longest waits, major page faults) as one JSON object to this file");
  cmd->callback([options] { bench(*options); });
}

}  // namespace tokenfeed::cli
