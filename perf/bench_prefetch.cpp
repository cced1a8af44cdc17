// bench_prefetch: the prefetch-depth sweep. For each batch shape, consumer step time,
// decode thread count and prefetch depth (fixed depths and auto), a fresh Loader over the
// same dataset feeds the trainer stand-in; one CSV row per measurement.
//
//   bench_prefetch --config base.xml --csv out.csv [--shapes 8x1024,32x512,4x8192]
//                  [--steps 0,200,2000] [--depths 1,2,4,8,16,32,64,auto] [--threads 1,2]
//                  [--repeats 3] [--seconds 0.5]
//
// Repeats are interleaved (the whole grid once, then again) so that a noisy moment of the
// machine spreads over variants instead of hitting one; report medians over repeats.
#include <cstdio>
#include <fstream>
#include <string>

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
};

ConsumerResult measure_depth(const Config& base, std::int64_t rows, std::int64_t cols, double step_us,
                             std::int64_t depth, std::int64_t threads, double seconds) {
  Config c = base;
  c.batch_size = rows;
  c.block_size = cols;
  c.prefetch_depth = depth;
  c.decode_threads = threads;
  Loader loader(c);
  // Warm-up long enough for auto depth to settle (it decides every 32 steps).
  const std::uint64_t warmup = step_us >= 1000 ? 150 : 300;
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
  app.add_option("--depths", o.depths, "Prefetch depths (auto allowed)")->capture_default_str();
  app.add_option("--threads", o.threads, "Decode threads")->capture_default_str();
  app.add_option("--repeats", o.repeats)->capture_default_str();
  app.add_option("--seconds", o.seconds, "Measured time per point (after warm-up)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  set_log_handler(nullptr);

  const Config base = load_config_file(o.config);
  std::ofstream csv(o.csv);
  csv << "repeat,shape,batch_size,block_size,consumer_us,depth_setting,depth_used,decode_threads,batches,seconds,"
         "batches_per_s,tokens_per_s,real_tokens_per_s,p50_us,p99_us,max_us,stall_fraction\n";
  std::printf("%-3s %-8s %8s %6s %5s %4s %3s %12s %9s %9s %8s\n", "rep", "shape", "step_us", "depth", "used", "thr",
              "", "batches/s", "p50_us", "p99_us", "stall%");
  for (int rep = 0; rep < o.repeats; ++rep) {
    for (const std::string& shape : split_list(o.shapes)) {
      const std::int64_t rows = std::stoll(shape.substr(0, shape.find('x')));
      const std::int64_t cols = std::stoll(shape.substr(shape.find('x') + 1));
      for (const std::string& step : split_list(o.steps)) {
        for (const std::string& threads : split_list(o.threads)) {
          for (const std::string& depth : split_list(o.depths)) {
            const std::int64_t d = depth == "auto" ? 0 : std::stoll(depth);
            const ConsumerResult r = measure_depth(base, rows, cols, std::stod(step), d, std::stoll(threads), o.seconds);
            const double positions = static_cast<double>(rows * cols);
            csv << rep << ',' << shape << ',' << rows << ',' << cols << ',' << step << ',' << depth << ',' << r.depth_used
                << ',' << threads << ',' << r.batches << ',' << r.seconds << ',' << r.batches_per_s << ','
                << r.batches_per_s * positions << ',' << static_cast<double>(r.real_positions) / r.seconds << ','
                << r.p50_us << ',' << r.p99_us << ',' << r.max_us << ',' << r.stall_fraction << '\n';
            csv.flush();
            std::printf("%-3d %-8s %8s %6s %5llu %4s %3s %12.0f %9.2f %9.2f %8.2f\n", rep, shape.c_str(), step.c_str(),
                        depth.c_str(), static_cast<unsigned long long>(r.depth_used), threads.c_str(), "",
                        r.batches_per_s, r.p50_us, r.p99_us, 100.0 * r.stall_fraction);
            std::fflush(stdout);
          }
        }
      }
    }
  }
  return 0;
}
