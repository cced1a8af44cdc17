// `tokenfeed inspect --config FILE --steps N`: what a config's first N steps hold. A
// shape_schedule: each stage's first step, shape, the rows and positions before it and the
// epoch its first batch reaches. A mixture: per stage each source's share of rows, of real
// tokens and of trained tokens, and the epoch each source reaches, after the weights from
// dataset sizes when the weights are "auto". The figures are the library's
// (src/inspect/shape_schedule_report, mixture_report); this file only prints them.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "inspect/mixture_report.hpp"
#include "inspect/shape_schedule_report.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed::cli {
namespace {

// Weights from dataset sizes: per source its tokens, rows of an epoch, weight, whether
// max_epochs capped it, and the epochs it repeats over the planned steps and over the steps
// inspected (all ranks), at its weight.
void print_weights_from_sizes(const MixtureWeightsFromSizes& figures) {
  std::printf("weights from dataset sizes: temperature %g", figures.temperature);
  if (figures.planned_steps) std::printf(", planned_steps %lld", static_cast<long long>(*figures.planned_steps));
  std::printf("\n  %-16s %14s %12s %10s %6s %14s %14s\n", "source", "tokens", "rows/epoch", "weight", "capped",
              "epochs_planned", "epochs_steps");
  for (const MixtureSizedSource& source : figures.sources) {
    const SizedWeight& w = source.sized;
    std::string planned = "-", inspected = "-";
    char number[64];
    if (w.weight.planned_epochs) {
      std::snprintf(number, sizeof number, "%.3f", *w.weight.planned_epochs);
      planned = number;
    }
    if (source.epochs_in_steps) {
      std::snprintf(number, sizeof number, "%.3f", *source.epochs_in_steps);
      inspected = number;
    }
    std::printf("  %-16s %14llu %12llu %10s %6s %14s %14s\n", w.name.c_str(), static_cast<unsigned long long>(w.tokens),
                static_cast<unsigned long long>(w.rows_per_epoch), w.weight.text.c_str(),
                w.weight.capped ? "yes" : "no", planned.c_str(), inspected.c_str());
  }
}

void print_stage(const MixtureReport& report, std::size_t s) {
  const MixtureStageFigures& stage = report.stages[s];
  if (!stage.last_step) {
    std::printf("stage %zu  from step %llu: not reached in %llu steps\n", s,
                static_cast<unsigned long long>(stage.first_step), static_cast<unsigned long long>(report.steps));
    return;
  }
  std::printf("stage %zu  steps %llu..%llu\n", s, static_cast<unsigned long long>(stage.first_step),
              static_cast<unsigned long long>(*stage.last_step));
  std::printf("  %-16s %10s %7s %14s %7s %14s %7s\n", "source", "rows", "share", "real_tokens", "share",
              "trained_tokens", "share");
  for (std::size_t i = 0; i < report.sources.size(); ++i) {
    const MixtureSourceShare& c = stage.sources[i];
    std::printf("  %-16s %10llu %6.2f%% %14llu %6.2f%% %14llu %6.2f%%\n", report.sources[i].c_str(),
                static_cast<unsigned long long>(c.rows), c.row_share, static_cast<unsigned long long>(c.real_tokens),
                c.real_share, static_cast<unsigned long long>(c.trained_tokens), c.trained_share);
  }
}

void print_shape_schedule(const std::string& config_file, const ShapeScheduleReport& report) {
  std::printf("shape_schedule %s: %zu stages; the first %llu steps of rank %lld (data-parallel size %llu)\n",
              config_file.c_str(), report.stages.size(), static_cast<unsigned long long>(report.steps),
              static_cast<long long>(report.rank), static_cast<unsigned long long>(report.data_parallel_size));
  // token_stream epoch windows under a curriculum: where each stage's first row is cut.
  const bool cut = std::any_of(report.stages.begin(), report.stages.end(),
                               [](const ShapeStageFigures& s) { return s.reached && s.reached->unit; });
  std::printf("  %5s %12s %12s %13s %10s %10s %16s %18s %8s %14s%s\n", "stage", "first_step", "end_step",
              "global_batch", "rows/rank", "block_size", "rows_before", "tokens_before", "epoch", "batch_in_epoch",
              cut ? "         unit   offset" : "");
  for (std::size_t i = 0; i < report.stages.size(); ++i) {
    const ShapeStageFigures& s = report.stages[i];
    const std::string end = s.end_step ? std::to_string(*s.end_step) : "-";
    std::string epoch = "not reached", batch = "-", position;
    if (s.reached) {
      epoch = s.reached->epoch ? std::to_string(*s.reached->epoch) : "random";
      batch = std::to_string(s.reached->batch_in_epoch);
    }
    if (cut) {
      const bool at = s.reached && s.reached->unit;
      char text[48];
      std::snprintf(text, sizeof text, " %12s %8s", at ? std::to_string(*s.reached->unit).c_str() : "-",
                    at ? std::to_string(*s.reached->offset).c_str() : "-");
      position = text;
    }
    std::printf("  %5zu %12llu %12s %13llu %10llu %10llu %16llu %18llu %8s %14s%s\n", i,
                static_cast<unsigned long long>(s.first_step), end.c_str(),
                static_cast<unsigned long long>(s.global_batch), static_cast<unsigned long long>(s.rows),
                static_cast<unsigned long long>(s.block_size), static_cast<unsigned long long>(s.rows_before),
                static_cast<unsigned long long>(s.tokens_before), epoch.c_str(), batch.c_str(), position.c_str());
  }
}

}  // namespace

void inspect_config(const std::string& config_file, long steps) {
  check_inspect_steps(steps, "inspect --steps");  // before the config is read
  const Config config = load_config_file(config_file);
  if (config.mixture.empty() && config.shape_schedule.empty()) {
    throw Error(ErrorKind::usage, "inspect --config '" + config_file +
                                      "': the config has no <mixture> and no <shape_schedule>; inspect a single "
                                      "dataset by its directory");
  }
  if (!config.shape_schedule.empty()) {
    print_shape_schedule(config_file, shape_schedule_report(config, steps, "inspect --steps"));
  }
  if (config.mixture.empty()) return;
  const MixtureReport report = mixture_report(config, steps, "inspect --steps");
  // Under a shape_schedule the batches' shapes are its stages' (printed above), not the keys'.
  const std::string shape = config.shape_schedule.empty() ? std::to_string(report.batch_size) + " x " +
                                                                std::to_string(report.block_size) + " per batch"
                                                          : "batch shapes by the shape_schedule above";
  std::printf("mixture %s: %zu sources, %zu stages; the first %llu steps of rank %lld (%s)\n", config_file.c_str(),
              report.sources.size(), report.stages.size(), static_cast<unsigned long long>(report.steps),
              static_cast<long long>(report.rank), shape.c_str());
  if (report.weights_from_sizes) print_weights_from_sizes(*report.weights_from_sizes);
  for (std::size_t s = 0; s < report.stages.size(); ++s) print_stage(report, s);
  std::printf("epochs after %llu steps (all ranks):\n", static_cast<unsigned long long>(report.steps));
  for (std::size_t i = 0; i < report.sources.size(); ++i) {
    if (const auto& epoch = report.epochs[i]) {
      std::printf("  %-16s epoch %llu (%llu epochs begun)\n", report.sources[i].c_str(),
                  static_cast<unsigned long long>(*epoch), static_cast<unsigned long long>(*epoch + 1));
    } else {
      std::printf("  %-16s random sampling: no epochs\n", report.sources[i].c_str());
    }
  }
}

}  // namespace tokenfeed::cli
