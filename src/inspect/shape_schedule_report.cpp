#include "inspect/shape_schedule_report.hpp"

#include <algorithm>
#include <string>

#include "inspect/mixture_report.hpp"
#include "splits/resolved_options.hpp"
#include "splits/shape_plan.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "util/checked_math.hpp"

namespace tokenfeed {
namespace {

// The stages' arithmetic from the loader's settled config (its data-parallel size known).
std::vector<ShapeStageFigures> stage_figures(const Config& resolved) {
  const auto schedule = shape_schedule_of(resolved, "train");
  const std::uint64_t dp = data_parallel_size(resolved);
  std::vector<ShapeStageFigures> stages;
  std::uint64_t tokens = 0;  // the positions of the steps before the stage
  for (const ShapeSchedule::Stage& s : schedule->stages()) {
    ShapeStageFigures& f = stages.emplace_back();
    f.first_step = s.first_step;
    f.end_step = s.end_step;
    f.global_batch = s.global_batch;
    f.rows = s.global_batch / dp;
    f.block_size = s.block_size;
    f.rows_before = s.rows_before;
    f.tokens_before = tokens;
    if (s.end_step) {
      tokens = checked_sum(tokens,
                           checked_product((*s.end_step - s.first_step) * s.global_batch, s.block_size,
                                           "the positions before a shape_schedule stage"),
                           "the positions before a shape_schedule stage");
    }
  }
  return stages;
}

}  // namespace

ShapeScheduleReport shape_schedule_report(Config config, std::int64_t steps, std::string_view steps_option) {
  check_inspect_steps(steps, steps_option);
  if (config.shape_schedule.empty()) throw Error(ErrorKind::usage, "the config has no shape_schedule");
  config.fields = batch_field_bit(BatchField::x);  // only the bookkeeping is read
  config.audit_log_dir.clear();                    // a look, not a run
  Loader loader(config);
  const Config& resolved = loader.config();
  ShapeScheduleReport report;
  report.steps = static_cast<std::uint64_t>(steps);
  report.rank = resolved.rank;
  report.data_parallel_size = data_parallel_size(resolved);
  report.stages = stage_figures(resolved);
  const bool random = resolved.batch_sampling_mode == SamplingMode::random;
  // Epoch windows re-cut from units (a row's id is unit x unit_tokens + offset).
  const auto schedule = shape_schedule_of(resolved, "train");
  const std::uint64_t unit_tokens =
      !random && resolved.dataset_mode == DatasetMode::token_stream && schedule->changes_block_size()
          ? schedule->largest_block_size() + 1
          : 0;
  // Read up to the first batch of the last stage that starts within the steps.
  std::uint64_t limit = 0;
  for (const ShapeStageFigures& s : report.stages) {
    if (s.first_step < report.steps) limit = s.first_step + 1;
  }
  std::size_t next = 0;  // the first stage not yet reached
  for (std::uint64_t step = 0; step < limit; ++step) {
    // Every batch before a stage's first is handed out too: the position of packed rows is
    // carried from batch to batch.
    const Batch batch = loader.get_batch("train");
    ++report.read;
    if (step < report.stages[next].first_step) continue;
    ShapeStageReached& reached = report.stages[next++].reached.emplace();
    if (!random) reached.epoch = batch.epoch();
    reached.batch_in_epoch = batch.batch_in_epoch();
    if (unit_tokens > 0 && batch.rows() > 0 && batch.episode_ids()[0] >= 0) {
      const auto id = static_cast<std::uint64_t>(batch.episode_ids()[0]);
      reached.unit = id / unit_tokens;
      reached.offset = id % unit_tokens;
    }
  }
  return report;
}

}  // namespace tokenfeed
