// bench_prefetch: the prefetch-depth sweep. For each batch shape, consumer step time,
// decode thread count and prefetch depth (fixed depths and auto), a fresh Loader over the
// same dataset feeds the trainer stand-in; one CSV row per measurement.
//
//   bench_prefetch --config base.xml --csv out.csv [--shapes 8x1024,32x512,4x8192]
//                  [--steps 0,200,2000] [--depths 1,2,4,8,16,32,64,auto] [--threads 1,2]
//                  [--repeats 3] [--seconds 0.5] [--order shuffle|listed|alternate]
//                  [--seed 1] [--warmup N]
//
// Repeats are interleaved (the whole grid once, then again) so that a noisy moment of the
// machine spreads over variants instead of hitting one; report medians over repeats.
// Within one (shape, step, threads) group the depths run in the order --order says:
//   shuffle    (default) a new seeded random order each repeat, so that no depth always
//              runs first, last, or right after the same other depth (the Loader of the
//              point before has just been torn down: its heap, TBB's threads and the
//              caches are what the next point starts from)
//   listed     the order given, every repeat
//   alternate  the order given on even repeats and reversed on odd ones: with two depths
//              (--depths 16,auto) an A B B A A B ... sequence, the focused A/B check
//              perf/ab_depth.py runs
// Each CSV row records its position in the group and the depth measured just before it
// in this process ("" for the first), so that order effects can be looked for.
//
// A depth is a number, `auto`, or `auto:MB`: auto with prefetch_memory_mb = MB, which caps
// how deep auto may grow and so how large its pipeline is built (limiter, ring, pool
// capacity): auto:10 at 8x1024 builds for 31 instead of 64, while starting at 16 as auto
// does. (With a cap at the starting depth auto is a fixed depth.)
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_common.hpp"
#include "tokenfeed/log.hpp"

using namespace tokenfeed;
using namespace tokenfeed::perf;

namespace {

struct Options {
  std::string config, csv;
  std::string shapes = "8x1024,32x512,4x8192";
  std::string steps = "0,200,2000";
  std::string depths = "1,2,4,8,16,32,64,auto";
  std::string threads = "1,2";
  int repeats = 3;
  double seconds = 0.5;
  std::string order = "shuffle";
  std::uint64_t seed = 1;
  long warmup = -1;  // -1: 300 batches, 150 with a step of 1 ms or more
};

// `depth`: a number, "auto" or "auto:MB" (see above).
ConsumerResult measure_depth(const Config& base, std::int64_t rows, std::int64_t cols, double step_us,
                             const std::string& depth, std::int64_t threads, double seconds, long warmup_batches) {
  Config c = base;
  c.batch_size = rows;
  c.block_size = cols;
  if (depth.rfind("auto", 0) == 0) {
    c.prefetch_depth = 0;
    if (depth.size() > 5 && depth[4] == ':') c.prefetch_memory_mb = std::stoll(depth.substr(5));
  } else {
    c.prefetch_depth = std::stoll(depth);
  }
  c.decode_threads = threads;
  Loader loader(c);
  // Warm-up long enough for auto depth to settle: it decides every 32 steps once 64 have
  // passed since its last change, so 150 steps allow two doublings (16 -> 64).
  const std::uint64_t warmup = warmup_batches >= 0 ? static_cast<std::uint64_t>(warmup_batches) : step_us >= 1000 ? 150 : 300;
  return run_consumer(loader, step_us, warmup, seconds, 100, 200000);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Prefetch-depth sweep: throughput and get_batch latency against depth, shape, step and threads"};
  app.add_option("--config", o.config, "Base XML config (dataset_dir, use_loss_mask, ...)")->required();
  app.add_option("--csv", o.csv, "Output CSV")->required();
  app.add_option("--shapes", o.shapes)->capture_default_str();
  app.add_option("--steps", o.steps, "Consumer step times, us")->capture_default_str();
  app.add_option("--depths", o.depths, "Prefetch depths: numbers, auto, auto:MB (auto with prefetch_memory_mb MB)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "Decode threads")->capture_default_str();
  app.add_option("--repeats", o.repeats)->capture_default_str();
  app.add_option("--seconds", o.seconds, "Measured time per point (after warm-up)")->capture_default_str();
  app.add_option("--order", o.order, "Order of the depths within a group: shuffle, listed or alternate")
      ->check(CLI::IsMember({"shuffle", "listed", "alternate"}))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed of the shuffled orders")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Warm-up batches per point (-1: 300, or 150 with a step >= 1 ms)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  set_log_handler(nullptr);

  const Config base = load_config_file(o.config);
  const std::string mode = to_string(Loader(base).config().dataset_mode);  // auto_detect resolved
  std::ofstream csv(o.csv);
  csv << "repeat,shape,batch_size,block_size,consumer_us,depth_setting,depth_used,decode_threads,batches,seconds,"
         "batches_per_s,tokens_per_s,real_tokens_per_s,p50_us,p99_us,max_us,stall_fraction,dataset_mode,position,"
         "previous\n";
  std::printf("%-3s %-8s %8s %6s %5s %4s %3s %12s %9s %9s %8s\n", "rep", "shape", "step_us", "depth", "used", "thr",
              "pos", "batches/s", "p50_us", "p99_us", "stall%");
  const std::vector<std::string> depths = split_list(o.depths);
  std::string previous;  // the depth setting measured just before, in this process
  std::uint64_t group = 0;
  for (int rep = 0; rep < o.repeats; ++rep) {
    for (const std::string& shape : split_list(o.shapes)) {
      const std::int64_t rows = std::stoll(shape.substr(0, shape.find('x')));
      const std::int64_t cols = std::stoll(shape.substr(shape.find('x') + 1));
      for (const std::string& step : split_list(o.steps)) {
        for (const std::string& threads : split_list(o.threads)) {
          std::vector<std::string> order = depths;
          if (o.order == "shuffle") {
            std::mt19937_64 rng(o.seed * 1000003u + group);
            std::shuffle(order.begin(), order.end(), rng);
          } else if (o.order == "alternate" && rep % 2 == 1) {
            std::reverse(order.begin(), order.end());
          }
          ++group;
          for (std::size_t position = 0; position < order.size(); ++position) {
            const std::string& depth = order[position];
            const ConsumerResult r =
                measure_depth(base, rows, cols, std::stod(step), depth, std::stoll(threads), o.seconds, o.warmup);
            const double positions = static_cast<double>(rows * cols);
            csv << rep << ',' << shape << ',' << rows << ',' << cols << ',' << step << ',' << depth << ',' << r.depth_used
                << ',' << threads << ',' << r.batches << ',' << r.seconds << ',' << r.batches_per_s << ','
                << r.batches_per_s * positions << ',' << static_cast<double>(r.real_positions) / r.seconds << ','
                << r.p50_us << ',' << r.p99_us << ',' << r.max_us << ',' << r.stall_fraction << ','
                << mode << ',' << position << ',' << previous << '\n';
            csv.flush();
            std::printf("%-3d %-8s %8s %6s %5llu %4s %3zu %12.0f %9.2f %9.2f %8.2f\n", rep, shape.c_str(), step.c_str(),
                        depth.c_str(), static_cast<unsigned long long>(r.depth_used), threads.c_str(), position,
                        r.batches_per_s, r.p50_us, r.p99_us, 100.0 * r.stall_fraction);
            std::fflush(stdout);
            previous = depth;
          }
        }
      }
    }
  }
  return 0;
}
