// bench_context_parallel: the CPU the loader's threads spend per position they produce, in
// sft_packed, without context parallelism and with it (docs/batch-contract.md, "Context
// parallelism"). One measure per variant, repeats interleaved (variant after variant, then
// again), medians:
//
//   plain    the config as given (context_parallel_size 1)
//   padded   context_parallel_size CP in one data-parallel group of CP ranks, as rank 0:
//            every episode padded to a multiple of 2·CP, the whole rows
//   split    the same with context_parallel_split: rank 0's share, rows block_size / CP
//
// Each measure opens a Loader and takes batches in a tight loop (the trainer reads the
// contract's spans, no values), warmup first; the figure is the CPU time of every thread
// but the trainer's (the decoders, the admitter) per position of the batches handed out
// (rows x cols, cols = block_size / CP for the split): what a position costs the loader.
// Pin it to one CPU (taskset) so that other work on the machine moves the variants alike.
//
//   bench_context_parallel --config packed.xml [--cp 2] [--repeats 7] [--seconds 2] [--json FILE]
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_common.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

namespace {

using namespace tokenfeed;
using namespace tokenfeed::perf;

struct Options {
  std::string config;
  std::int64_t cp = 2;
  int repeats = 7;
  double seconds = 2;
  std::string json;
};

struct Variant {
  std::string name;
  Config config;
  std::vector<double> ns_per_position;  // one per repeat
  std::vector<double> fill;             // real positions over the whole rows, per repeat
};

std::vector<Variant> variants(const Options& o) {
  const Config plain = load_config_file(o.config);
  Config padded = plain;
  padded.context_parallel_size = o.cp;
  padded.world_size = o.cp;
  padded.rank = 0;
  Config split = padded;
  split.context_parallel_split = true;
  return {{"plain", plain, {}, {}}, {"padded", padded, {}, {}}, {"split", split, {}, {}}};
}

// One measure of `v`: the loader's CPU per position produced, in ns.
void measure_variant(Variant& v, const Options& o) {
  Loader loader(v.config);
  const ConsumerResult r = run_consumer(loader, 0, 20, o.seconds, 50, UINT64_MAX);
  const Batch probe = loader.get_batch();
  const double positions = static_cast<double>(probe.rows() * probe.cols());
  const double whole = static_cast<double>(probe.rows()) * static_cast<double>(v.config.block_size);
  v.ns_per_position.push_back(r.loader_cpu_us_per_batch() * 1e3 / positions);
  v.fill.push_back(static_cast<double>(r.real_positions) / (static_cast<double>(r.batches) * whole));
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("The loader's CPU per position produced: sft_packed plain, with context-parallel padding, and split");
  app.add_option("--config", o.config, "An sft_packed config (block_size a multiple of 2 x --cp)")->required();
  app.add_option("--cp", o.cp, "context_parallel_size of the padded and split variants")->check(CLI::Range(2, 1024));
  app.add_option("--repeats", o.repeats, "Measures per variant, interleaved")->check(CLI::PositiveNumber);
  app.add_option("--seconds", o.seconds, "Seconds per measure (after 20 warmup batches)")->check(CLI::PositiveNumber);
  app.add_option("--json", o.json, "Also write every figure here");
  CLI11_PARSE(app, argc, argv);
  set_log_handler(nullptr);

  std::vector<Variant> all = variants(o);
  for (int repeat = 0; repeat < o.repeats; ++repeat) {
    for (Variant& v : all) measure_variant(v, o);
  }
  const double base = median(all[0].ns_per_position);
  std::printf("%-8s %14s %10s %8s   %s\n", "variant", "ns/position", "vs plain", "fill", "every repeat (ns/position)");
  nlohmann::json out;
  for (const Variant& v : all) {
    const double m = median(v.ns_per_position);
    std::string each;
    for (const double x : v.ns_per_position) each += (each.empty() ? "" : ", ") + std::to_string(x).substr(0, 5);
    std::printf("%-8s %14.3f %9.3fx %7.1f%%   %s\n", v.name.c_str(), m, m / base, 100.0 * median(v.fill), each.c_str());
    out[v.name] = {{"ns_per_position_median", m},
                   {"vs_plain", m / base},
                   {"fill_median", median(v.fill)},
                   {"ns_per_position", v.ns_per_position}};
  }
  if (!o.json.empty()) std::ofstream(o.json) << out.dump(2) << "\n";
  return 0;
}
