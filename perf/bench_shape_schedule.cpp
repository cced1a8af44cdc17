// bench_shape_schedule: whether the first batch of each shape_schedule stage makes the
// trainer wait longer than the others (docs/schedules.md: the pipeline plans every step's
// size in advance, so a stage boundary should not stall).
//
// A trainer stand-in takes --steps batches of the config's train split, spinning a step
// time proportional to the batch's rows (--us-per-row) or, for a sequence-length schedule,
// to its positions (--us-per-kpos: per 1024 positions) after each, and records get_batch's
// wall time per batch. Per stage: the first batch's time against the median of the other
// batches of that stage, over --repeats fresh loaders (the table gives the median of each
// over the repeats).
//
//   bench_shape_schedule --config schedule.xml [--steps 600] [--us-per-row 20 | --us-per-kpos U] [--repeats 5]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_common.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

namespace {

using namespace tokenfeed;

struct StageWaits {
  std::uint64_t first_step = 0;
  std::size_t rows = 0, cols = 0;
  std::vector<double> first_us;   // per repeat
  std::vector<double> median_us;  // per repeat: the stage's other batches
  std::vector<double> p90_us;     // per repeat: the same, 90th percentile
};

// The trainer's step time for a batch: per row, or per 1024 positions when given (> 0).
struct StepTime {
  double us_per_row = 20;
  double us_per_kpos = 0;
  double of(std::size_t rows, std::size_t cols) const {
    if (us_per_kpos > 0) return us_per_kpos * static_cast<double>(rows * cols) / 1024.0;
    return us_per_row * static_cast<double>(rows);
  }
};

// One run: get_batch's wall time of every step, and each step's shape.
void run_once(const Config& c, long steps, const StepTime& step_time, std::map<std::uint64_t, StageWaits>& stages) {
  Loader loader(c);
  std::vector<double> waits;
  std::vector<std::pair<std::size_t, std::size_t>> shapes;
  for (long s = 0; s < steps; ++s) {
    const auto t0 = perf::Clock::now();
    Batch b = loader.get_batch("train");
    waits.push_back(std::chrono::duration<double, std::micro>(perf::Clock::now() - t0).count());
    shapes.emplace_back(b.rows(), b.cols());
    b.release();
    perf::spin_for(step_time.of(shapes.back().first, shapes.back().second));
  }
  // Stages by their first step: where the shape changes (and step 0).
  std::size_t begin = 0;
  for (std::size_t s = 1; s <= shapes.size(); ++s) {
    if (s < shapes.size() && shapes[s] == shapes[begin]) continue;
    StageWaits& stage = stages[begin];
    stage.first_step = begin;
    stage.rows = shapes[begin].first;
    stage.cols = shapes[begin].second;
    stage.first_us.push_back(waits[begin]);
    std::vector<double> rest(waits.begin() + static_cast<std::ptrdiff_t>(begin) + 1,
                             waits.begin() + static_cast<std::ptrdiff_t>(s));
    stage.median_us.push_back(rest.empty() ? 0.0 : perf::median(rest));
    std::sort(rest.begin(), rest.end());
    stage.p90_us.push_back(rest.empty() ? 0.0 : nearest_rank(rest, 0.9));
    begin = s;
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  long steps = 600, repeats = 5;
  StepTime step_time;
  CLI::App app("The wait of each shape_schedule stage's first batch against the stage's median wait");
  app.add_option("--config", config_path, "A config with a <shape_schedule>")->required();
  app.add_option("--steps", steps, "Batches per run")->check(CLI::PositiveNumber);
  CLI::Option* per_row =
      app.add_option("--us-per-row", step_time.us_per_row, "The trainer's step time per row of the batch, microseconds")
          ->check(CLI::NonNegativeNumber);
  app.add_option("--us-per-kpos", step_time.us_per_kpos,
                 "The trainer's step time per 1024 positions of the batch, microseconds (instead of --us-per-row)")
      ->check(CLI::PositiveNumber)
      ->excludes(per_row);
  app.add_option("--repeats", repeats, "Fresh loaders")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  set_log_handler(nullptr);
  Config c = load_config_file(config_path);
  c.audit_log_dir.clear();
  std::map<std::uint64_t, StageWaits> stages;
  for (long r = 0; r < repeats; ++r) run_once(c, steps, step_time, stages);
  if (step_time.us_per_kpos > 0) {
    std::printf("%ld steps x %ld repeats, trainer step %.0f us per 1024 positions", steps, repeats,
                step_time.us_per_kpos);
  } else {
    std::printf("%ld steps x %ld repeats, trainer step %.0f us per row", steps, repeats, step_time.us_per_row);
  }
  std::printf("; get_batch wall time, medians over repeats:\n");
  std::printf("%10s %6s %6s %14s %16s %13s %8s\n", "first_step", "rows", "cols", "first batch us", "stage median us",
              "stage p90 us", "ratio");
  for (auto& [first, stage] : stages) {
    const double f = perf::median(stage.first_us), m = perf::median(stage.median_us);
    std::printf("%10llu %6zu %6zu %14.1f %16.1f %13.1f %8.2f\n", static_cast<unsigned long long>(first), stage.rows,
                stage.cols, f, m, perf::median(stage.p90_us), m > 0 ? f / m : 0.0);
  }
  return 0;
}
