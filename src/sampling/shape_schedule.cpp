#include "sampling/shape_schedule.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "tokenfeed/error.hpp"
#include "util/checked_math.hpp"

namespace tokenfeed {

ShapeSchedule::ShapeSchedule(const std::vector<Given>& given, std::uint64_t key_block_size) {
  std::uint64_t first = 0;
  std::uint64_t rows = 0;
  for (std::size_t i = 0; i < given.size(); ++i) {
    stages_.push_back(Stage{first, given[i].end_step, given[i].global_batch, rows, given[i].block_size});
    if (!given[i].end_step) break;
    const std::uint64_t steps = *given[i].end_step - first;
    rows = checked_sum(rows,
                       checked_product(steps, given[i].global_batch,
                                       "shape_schedule stage " + std::to_string(i) + ": its steps x global_batch_size"),
                       "the rows before shape_schedule stage " + std::to_string(i + 1));
    first = *given[i].end_step;
  }
  key_block_size_ = key_block_size != 0 ? key_block_size : stages_.front().block_size;
}

ShapeSchedule ShapeSchedule::constant(std::uint64_t global_batch, std::uint64_t block_size) {
  return ShapeSchedule({Given{std::nullopt, global_batch, block_size}});
}

std::size_t ShapeSchedule::stage_index(std::uint64_t step) const noexcept {
  // The last stage whose first step is <= step (stages are few: a linear scan).
  std::size_t i = 0;
  while (i + 1 < stages_.size() && stages_[i + 1].first_step <= step) ++i;
  return i;
}

std::uint64_t ShapeSchedule::rows_before(std::uint64_t step) const {
  const Stage& stage = stage_at(step);
  return checked_sum(stage.rows_before,
                     checked_product(step - stage.first_step, stage.global_batch, "step x global_batch_size"),
                     "the rows before step " + std::to_string(step));
}

std::uint64_t ShapeSchedule::step_of_row(std::uint64_t row) const noexcept {
  // The last stage whose first row is <= row; a stage with no steps (never: ends increase)
  // would hold no row.
  std::size_t i = 0;
  while (i + 1 < stages_.size() && stages_[i + 1].rows_before <= row) ++i;
  const Stage& stage = stages_[i];
  return stage.first_step + (row - stage.rows_before) / stage.global_batch;
}

std::uint64_t ShapeSchedule::largest_global_batch() const noexcept {
  std::uint64_t largest = 0;
  for (const Stage& s : stages_) largest = std::max(largest, s.global_batch);
  return largest;
}

std::uint64_t ShapeSchedule::largest_block_size() const noexcept {
  std::uint64_t largest = 0;
  for (const Stage& s : stages_) largest = std::max(largest, s.block_size);
  return largest;
}

std::uint64_t ShapeSchedule::shortest_block_size() const noexcept {
  std::uint64_t shortest = stages_.front().block_size;
  for (const Stage& s : stages_) shortest = std::min(shortest, s.block_size);
  return shortest;
}

bool ShapeSchedule::changes_block_size() const noexcept {
  return std::any_of(stages_.begin(), stages_.end(),
                     [this](const Stage& s) { return s.block_size != key_block_size_; });
}

// ---- ScheduledEpochs ----

namespace {

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) noexcept { return a / b + (a % b != 0 ? 1 : 0); }

// Rows of an epoch of `units` units of `unit` tokens from `from` on, at `stride` tokens a
// row: the rest of the unit started, then ceil(unit / stride) per unit.
std::uint64_t rows_from(UnitCut from, std::uint64_t units, std::uint64_t unit, std::uint64_t stride) noexcept {
  if (from.unit >= units) return 0;
  const std::uint64_t per = ceil_div(unit, stride);
  if (from.offset == 0) return (units - from.unit) * per;
  return ceil_div(unit - from.offset, stride) + (units - from.unit - 1) * per;
}

// Where the row `rows` rows after the one cut at `from` is cut (past the epoch's end: a
// unit >= its units).
UnitCut advance(UnitCut from, std::uint64_t rows, std::uint64_t unit, std::uint64_t stride) noexcept {
  if (from.offset != 0) {
    const std::uint64_t in_unit = ceil_div(unit - from.offset, stride);
    if (rows < in_unit) return UnitCut{from.unit, from.offset + rows * stride};
    rows -= in_unit;
    from = UnitCut{from.unit + 1, 0};
  }
  const std::uint64_t per = ceil_div(unit, stride);
  return UnitCut{from.unit + rows / per, rows % per * stride};
}

UnitCut cut_of(const EpochPoint& point) noexcept { return UnitCut{point.first_row, point.offset}; }

}  // namespace

ScheduledEpochs::ScheduledEpochs(ShapeSchedule schedule, std::uint64_t samples, bool drop_last,
                                 std::uint64_t unit_tokens)
    : schedule_(std::move(schedule)), samples_(samples), drop_last_(drop_last), unit_tokens_(unit_tokens) {
  const auto& stages = schedule_.stages();
  const std::uint64_t unit = std::max<std::uint64_t>(unit_tokens_, 1);
  origins_.reserve(stages.size());
  origins_.push_back(origin_at(EpochPoint{0, 0, 0, stages[0].global_batch, 0}, stride_of(0)));
  for (std::size_t i = 1; i < stages.size(); ++i) {
    // Just after the previous stage's last batch, before deciding whether its epoch goes on:
    // that is the new size's to say (a remainder too small for the old size may hold a
    // batch of the new one). With units the new stage cuts on from the token reached.
    const EpochPoint last =
        walk(origins_.back(), stages[i].first_step - stages[i - 1].first_step - 1, stride_of(i - 1));
    const UnitCut next = advance(cut_of(last), last.global_batch, unit, stride_of(i - 1));
    origins_.push_back(origin_at(
        EpochPoint{last.epoch, last.batch_in_epoch + 1, next.unit, stages[i].global_batch, next.offset}, stride_of(i)));
  }
}

std::optional<std::size_t> ScheduledEpochs::first_stage_short(const ShapeSchedule& schedule, std::uint64_t samples,
                                                              bool drop_last, std::uint64_t unit_tokens) noexcept {
  const auto& stages = schedule.stages();
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const std::uint64_t per_unit = unit_tokens > 0 ? ceil_div(unit_tokens, stages[i].block_size + 1) : 1;
    if (samples == 0 || (drop_last && stages[i].global_batch > samples * per_unit)) return i;
  }
  return std::nullopt;
}

std::uint64_t ScheduledEpochs::stride_of(std::size_t stage) const noexcept {
  return unit_tokens_ > 0 ? schedule_.stages()[stage].block_size + 1 : 1;
}

std::uint64_t ScheduledEpochs::batches_from(UnitCut from, std::uint64_t global_batch,
                                            std::uint64_t stride) const noexcept {
  const std::uint64_t left = rows_from(from, samples_, std::max<std::uint64_t>(unit_tokens_, 1), stride);
  return left / global_batch + (!drop_last_ && left % global_batch != 0 ? 1 : 0);
}

std::uint64_t ScheduledEpochs::batches_per_epoch(std::uint64_t global_batch, std::uint64_t stride) const noexcept {
  return batches_from(UnitCut{}, global_batch, stride);
}

ScheduledEpochs::Origin ScheduledEpochs::origin_at(const EpochPoint& point, std::uint64_t stride) const noexcept {
  return Origin{point, batches_from(cut_of(point), point.global_batch, stride)};
}

EpochPoint ScheduledEpochs::walk(const Origin& origin, std::uint64_t steps, std::uint64_t stride) const noexcept {
  const EpochPoint& o = origin.point;
  const std::uint64_t unit = std::max<std::uint64_t>(unit_tokens_, 1);
  if (steps < origin.left_in_epoch) {
    const UnitCut at = advance(cut_of(o), steps * o.global_batch, unit, stride);
    return EpochPoint{o.epoch, o.batch_in_epoch + steps, at.unit, o.global_batch, at.offset};
  }
  // The rest of the origin's epoch, then whole epochs of `per` batches.
  const std::uint64_t after = steps - origin.left_in_epoch;
  const std::uint64_t per = batches_per_epoch(o.global_batch, stride);
  if (per == 0) return o;  // excluded by the constructor's precondition
  const std::uint64_t in_epoch = after % per;
  const UnitCut at = advance(UnitCut{}, in_epoch * o.global_batch, unit, stride);
  return EpochPoint{o.epoch + 1 + after / per, in_epoch, at.unit, o.global_batch, at.offset};
}

EpochPoint ScheduledEpochs::at(std::uint64_t step) const {
  const std::size_t i = schedule_.stage_index(step);
  return walk(origins_[i], step - schedule_.stages()[i].first_step, stride_of(i));
}

std::uint64_t ScheduledEpochs::first_step_of(std::uint64_t epoch) const {
  const auto& stages = schedule_.stages();
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const Origin& origin = origins_[i];
    const EpochPoint& o = origin.point;
    if (epoch < o.epoch) break;  // started in an earlier stage: not reached in order
    std::uint64_t step = 0;
    if (epoch == o.epoch) {
      if (o.batch_in_epoch != 0 || o.first_row != 0 || o.offset != 0) continue;  // it started before this stage
      step = stages[i].first_step;
    } else {
      const std::uint64_t per = batches_per_epoch(o.global_batch, stride_of(i));
      step = checked_sum(stages[i].first_step + origin.left_in_epoch,
                         checked_product(epoch - o.epoch - 1, per, "epoch x batches per epoch"),
                         "the first step of epoch " + std::to_string(epoch));
    }
    if (!stages[i].end_step || step < *stages[i].end_step) return step;
  }
  // Every epoch starts somewhere (the last stage lasts for ever): only an epoch that began
  // before stage i while i's origin is later can reach here, which the walk excludes.
  return 0;
}

std::uint64_t ScheduledEpochs::samples_in_epoch(std::uint64_t epoch) const {
  if (!drop_last_) return samples_;
  const std::uint64_t step = first_step_of(epoch + 1) - 1;
  const EpochPoint last = at(step);
  const UnitCut end = advance(cut_of(last), last.global_batch, std::max<std::uint64_t>(unit_tokens_, 1),
                              stride_of(schedule_.stage_index(step)));
  return std::min(samples_, end.unit + (end.offset != 0 ? 1 : 0));
}

UnitCut ScheduledEpochs::cut(const EpochPoint& point, std::uint64_t row, std::uint64_t block_size) const noexcept {
  const std::uint64_t stride = unit_tokens_ > 0 ? block_size + 1 : 1;
  return advance(cut_of(point), row, std::max<std::uint64_t>(unit_tokens_, 1), stride);
}

std::uint64_t ScheduledEpochs::rows_left(const EpochPoint& point, std::uint64_t block_size) const noexcept {
  const std::uint64_t stride = unit_tokens_ > 0 ? block_size + 1 : 1;
  return rows_from(cut_of(point), samples_, std::max<std::uint64_t>(unit_tokens_, 1), stride);
}

// ---- CutEpochs ----

std::optional<std::size_t> CutEpochs::first_stage_short(const ShapeSchedule& schedule, bool drop_last,
                                                        const RowsAt& rows_at) {
  // Cutting at a shorter length never gives fewer rows, so an epoch holds at least the rows
  // at the longest block size, whatever its lengths.
  const std::uint64_t fewest = rows_at(schedule.largest_block_size());
  const auto& stages = schedule.stages();
  for (std::size_t i = 0; i < stages.size(); ++i) {
    if (fewest == 0 || (drop_last && stages[i].global_batch > fewest)) return i;
  }
  return std::nullopt;
}

CutEpochs::CutEpochs(ShapeSchedule schedule, bool drop_last, const RowsAt& rows_at, const RowsOf& rows_of)
    : schedule_(std::move(schedule)), drop_last_(drop_last) {
  std::uint64_t epoch = 0, step = 0;
  for (;;) {
    const std::size_t i = schedule_.stage_index(step);
    const ShapeSchedule::Stage& stage = schedule_.stages()[i];
    const std::uint64_t B = stage.global_batch, P = rows_at(stage.block_size);
    const std::uint64_t spans = ceil_div(P, B);            // the steps an epoch's rows fall on
    const std::uint64_t per = drop_last_ ? P / B : spans;  // the batches it forms
    if (per == 0) {
      throw Error(ErrorKind::config, "shape_schedule stage " + std::to_string(i) + ": an epoch of " +
                                         std::to_string(P) + " rows at block_size " + std::to_string(stage.block_size) +
                                         " forms no global batch of " + std::to_string(B) +
                                         " rows with epoch_drop_last=true");
    }
    if (!stage.end_step) {  // every epoch from here on is one of the last stage
      runs_.push_back(Run{epoch, step, std::nullopt, per, P});
      return;
    }
    const std::uint64_t left = *stage.end_step - step;
    if (left >= spans) {  // epochs whose rows all fall in this stage's steps
      const std::uint64_t epochs = (left - spans) / per + 1;
      runs_.push_back(Run{epoch, step, epochs, per, P});
      epoch += epochs;
      step += epochs * per;
      continue;
    }
    // An epoch that crosses the stage's end: its rows counted by cutting its order.
    const std::uint64_t first_row = schedule_.rows_before(step);
    const std::uint64_t rows = rows_of(epoch, first_row);
    const std::uint64_t next = rows == 0    ? step
                               : drop_last_ ? schedule_.step_of_row(first_row + rows)
                                            : schedule_.step_of_row(first_row + rows - 1) + 1;
    if (next <= step) {
      throw Error(ErrorKind::config,
                  "epoch " + std::to_string(epoch) + " from step " + std::to_string(step) + " cuts into " +
                      std::to_string(rows) + " rows, fewer than the global batch of shape_schedule stage " +
                      std::to_string(i) + " (" + std::to_string(B) + ") with epoch_drop_last=true: it forms no batch");
    }
    runs_.push_back(Run{epoch, step, 1, next - step, rows});
    ++epoch;
    step = next;
  }
}

const CutEpochs::Run& CutEpochs::run_of_epoch(std::uint64_t epoch) const noexcept {
  std::size_t i = 0;
  while (i + 1 < runs_.size() && runs_[i + 1].first_epoch <= epoch) ++i;
  return runs_[i];
}

std::uint64_t CutEpochs::first_step_of(std::uint64_t epoch) const {
  const Run& run = run_of_epoch(epoch);
  return checked_sum(run.first_step, checked_product(epoch - run.first_epoch, run.batches, "epoch x batches per epoch"),
                     "the first step of epoch " + std::to_string(epoch));
}

EpochPoint CutEpochs::at(std::uint64_t step) const {
  std::size_t i = 0;
  while (i + 1 < runs_.size() && runs_[i + 1].first_step <= step) ++i;
  const Run& run = runs_[i];
  const std::uint64_t in_run = step - run.first_step;
  const std::uint64_t epoch = run.first_epoch + in_run / run.batches;
  const std::uint64_t first_step = step - in_run % run.batches;
  return EpochPoint{epoch, in_run % run.batches, schedule_.rows_before(step) - schedule_.rows_before(first_step),
                    schedule_.global_batch_at(step), 0};
}

std::uint64_t CutEpochs::samples_in_epoch(std::uint64_t epoch) const {
  const Run& run = run_of_epoch(epoch);
  if (!drop_last_) return run.rows;
  const std::uint64_t first = first_step_of(epoch);
  return schedule_.rows_before(first + run.batches) - schedule_.rows_before(first);
}

}  // namespace tokenfeed
