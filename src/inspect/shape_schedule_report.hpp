// shape_schedule_report: where a batch-size schedule's stages fall in the data (`tokenfeed
// inspect --config FILE --steps N` prints it, Python's tokenfeed.inspect(config, steps=N)
// returns it as a dict): per stage its first step, global batch, this rank's rows, block
// size, the rows and positions the steps before it took, and, for each stage that starts
// within the first N steps, the epoch and batch in epoch its first batch has (and, for
// token_stream epoch windows under a sequence-length schedule, the unit and offset its
// first row is cut at), read from the
// batches a loader over the config gives (the loader's own arithmetic, not a copy of it).
//
// Thread-safety: a free function; it runs a Loader (its threads end before it returns).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "tokenfeed/config.hpp"

namespace tokenfeed {

// Where a stage's first batch stands in its split's epochs.
struct ShapeStageReached {
  std::optional<std::uint64_t> epoch;  // absent in random sampling (no epochs)
  std::uint64_t batch_in_epoch = 0;    // == the step in random sampling
  // token_stream epoch windows under a sequence-length schedule: where this rank's first
  // row is cut, the unit (its window id at the longest block size) and the token offset in
  // it. Absent otherwise.
  std::optional<std::uint64_t> unit, offset;
};

struct ShapeStageFigures {
  std::uint64_t first_step = 0;
  std::optional<std::uint64_t> end_step;  // exclusive; absent on the last stage
  std::uint64_t global_batch = 0;         // rows per step over the data-parallel ranks
  std::uint64_t rows = 0;                 // this rank's rows per step
  std::uint64_t block_size = 0;
  std::uint64_t rows_before = 0;    // global rows the steps before first_step took
  std::uint64_t tokens_before = 0;  // their positions (each stage's rows x its block size)
  // Absent when the stage starts at or after the steps read.
  std::optional<ShapeStageReached> reached;
};

struct ShapeScheduleReport {
  std::uint64_t steps = 0;  // the steps the stages were looked for in
  std::uint64_t read = 0;   // the batches read (up to the last stage starting within steps)
  std::int64_t rank = 0;
  std::uint64_t data_parallel_size = 1;
  std::vector<ShapeStageFigures> stages;
};

// The train split's schedule over its first `steps` steps: reads batches up to the first
// step of the last stage that starts within them (every field off but the bookkeeping, no
// audit log: a look, not a run). Throws check_inspect_steps' Error(usage), Error(usage) for
// a config without a shape_schedule, and the errors a Loader over the config throws.
ShapeScheduleReport shape_schedule_report(Config config, std::int64_t steps, std::string_view steps_option);

}  // namespace tokenfeed
