// ShapeSchedule: the global batch size and block size in force at each step of a split's
// stream (a batch-size warmup, a sequence-length curriculum: config key shape_schedule), and
// where a stream consumed in sequence stands at any step when its batches change size.
//
// The data is consumed in the same order whatever the shape: global batch k takes the
// rows that follow batch k-1's, so global row counters and epoch offsets are sums of the
// sizes before. Every stage's end is known in advance, so each position is pure
// arithmetic over the stages (O(stages)), and resuming at a step needs only the step.
//
// Epoch rule (ScheduledEpochs): an epoch of N samples is consumed from its offset o in
// global batches of the size then in force; with drop_last a remainder smaller than the
// size in force ends the epoch (it is skipped), without it the last batch of the epoch
// takes the remainder and is completed with fill rows. A batch never spans two epochs.
//
// Units (ScheduledEpochs with unit_tokens = U > 0: token_stream epoch windows under a
// sequence-length curriculum): the epoch's N samples are units of U tokens (the windows of
// the longest stage length), and a stage of block size T cuts them, in epoch order, into
// rows of T + 1 tokens (stride T + 1; the last piece of a unit shorter, a partial row). A
// position in the epoch is then (unit, token offset in it): the rows left from there are
// ceil((U - offset) / (T + 1)) of the unit started plus ceil(U / (T + 1)) per unit after,
// and the next stage continues from the position reached (nothing skipped or repeated).
// Without units every sample is one row (U = 1, stride 1), the arithmetic above.
//
// Cut documents (CutEpochs: truncation=split under a sequence-length curriculum): an
// epoch's documents are cut, in epoch order, into rows at the block size of the global row
// each falls on, so its row count depends on where it starts and, when it crosses a change
// of stage, on its order. Epoch e starts at a step s_e (a batch never spans two epochs), at
// global row G_e = rows_before(s_e), and holds R_e rows; its batches are the steps from s_e
// on while a whole global batch is left (drop_last: s_{e+1} = step_of_row(G_e + R_e), the
// remainder skipped) or any row is (else: s_{e+1} = step_of_row(G_e + R_e - 1) + 1, the last
// batch completed with fill rows). An epoch whose rows all fall in one stage of block size
// T has the order-independent count of rows at T; the others, at most one per change of
// stage, are counted by cutting their order once, at construction. So any step's position
// is arithmetic over runs of equal epochs.
//
// Thread-safety: immutable after construction; every member may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace tokenfeed {

class ShapeSchedule {
 public:
  struct Stage {
    std::uint64_t first_step = 0;
    std::optional<std::uint64_t> end_step;  // exclusive; absent on the last stage
    std::uint64_t global_batch = 1;         // rows per step over the data-parallel ranks
    std::uint64_t rows_before = 0;          // global rows the steps before first_step took
    std::uint64_t block_size = 0;           // positions per row (0: not scheduled, the split's)
  };
  // A stage as given: where it ends (absent on the last), its global batch size and block size.
  struct Given {
    std::optional<std::uint64_t> end_step;
    std::uint64_t global_batch = 1;
    std::uint64_t block_size = 0;
  };

  // REQUIRES: `given` is non-empty, every end but the last's present and increasing, the
  // last's absent, every global batch > 0. Throws Error(config) when the rows before a
  // stage overflow 64 bits.
  // `key_block_size`: the block size rows have without the schedule (the config key's),
  // which a curriculum's lengths differ from; 0: the first stage's.
  explicit ShapeSchedule(const std::vector<Given>& given, std::uint64_t key_block_size = 0);

  const std::vector<Stage>& stages() const noexcept { return stages_; }
  // One stage of `global_batch` rows (of `block_size` positions) for ever.
  static ShapeSchedule constant(std::uint64_t global_batch, std::uint64_t block_size = 0);
  // The index (into stages()) of the stage in force at `step`, and that stage.
  std::size_t stage_index(std::uint64_t step) const noexcept;
  const Stage& stage_at(std::uint64_t step) const noexcept { return stages_[stage_index(step)]; }
  std::uint64_t global_batch_at(std::uint64_t step) const noexcept { return stage_at(step).global_batch; }
  // Global rows the steps before `step` took. Throws Error(config) on overflow.
  std::uint64_t rows_before(std::uint64_t step) const;
  std::uint64_t block_size_at(std::uint64_t step) const noexcept { return stage_at(step).block_size; }
  // The step whose rows hold global row `row` (the inverse of rows_before).
  std::uint64_t step_of_row(std::uint64_t row) const noexcept;
  // The largest global batch, and block size, of any stage.
  std::uint64_t largest_global_batch() const noexcept;
  std::uint64_t largest_block_size() const noexcept;
  // The shortest block size of any stage.
  std::uint64_t shortest_block_size() const noexcept;
  // Whether some stage's block size differs from the key's (a sequence-length curriculum,
  // also when every stage has the same length other than the key's).
  bool changes_block_size() const noexcept;

 private:
  std::vector<Stage> stages_;
  std::uint64_t key_block_size_ = 0;
};

// Where global batch `step` stands in its epoch.
struct EpochPoint {
  std::uint64_t epoch = 0;
  std::uint64_t batch_in_epoch = 0;
  std::uint64_t first_row = 0;     // the global batch's first position in the epoch's order
                                   // (with units: the unit its first row is cut from)
  std::uint64_t global_batch = 1;  // rows of the global batch (fill rows included)
  std::uint64_t offset = 0;        // with units: the first row's token offset in its unit
};

// Where a row is cut: unit `unit` of the epoch's order (>= the epoch's samples: past its
// end, a fill row) from token `offset` on.
struct UnitCut {
  std::uint64_t unit = 0;
  std::uint64_t offset = 0;
};

class ScheduledEpochs {
 public:
  // An epoch of `samples` ids consumed under `schedule`; `unit_tokens` > 0: the ids are
  // units of that many tokens cut into rows of each stage's block size + 1 (REQUIRES: every
  // stage's block size < unit_tokens). REQUIRES: with drop_last, every stage's global batch
  // <= its rows per epoch (else no epoch ever ends; check with first_stage_short()).
  ScheduledEpochs(ShapeSchedule schedule, std::uint64_t samples, bool drop_last, std::uint64_t unit_tokens = 0);

  // The first stage (by index) whose global batch exceeds the rows of an epoch of `samples`
  // ids (units of `unit_tokens`, as the constructor) with drop_last, or nullopt when every
  // stage forms a batch.
  static std::optional<std::size_t> first_stage_short(const ShapeSchedule& schedule, std::uint64_t samples,
                                                      bool drop_last, std::uint64_t unit_tokens = 0) noexcept;

  const ShapeSchedule& schedule() const noexcept { return schedule_; }
  EpochPoint at(std::uint64_t step) const;
  // The step at which epoch `epoch` starts.
  std::uint64_t first_step_of(std::uint64_t epoch) const;
  std::uint64_t batches_in_epoch(std::uint64_t epoch) const { return first_step_of(epoch + 1) - first_step_of(epoch); }
  // Ids epoch `epoch` delivers over all ranks (fill rows aside; the drop_last remainder
  // skipped).
  // With units: units the epoch delivers at least a piece of.
  std::uint64_t samples_in_epoch(std::uint64_t epoch) const;

  // Where row `row` of the global batch at `point` (of block size `block_size`) is cut:
  // `row` rows on from the batch's first. Without units, unit = first_row + row.
  UnitCut cut(const EpochPoint& point, std::uint64_t row, std::uint64_t block_size) const noexcept;
  // Rows of the epoch from the batch at `point` on (0 past its end), at `block_size`.
  std::uint64_t rows_left(const EpochPoint& point, std::uint64_t block_size) const noexcept;
  // Tokens per unit (0: no units, each id one row).
  std::uint64_t unit_tokens() const noexcept { return unit_tokens_; }

 private:
  // Where each stage starts, and how many batches are left of the epoch there.
  struct Origin {
    EpochPoint point;
    std::uint64_t left_in_epoch = 0;
  };
  ShapeSchedule schedule_;
  std::uint64_t samples_;
  bool drop_last_;
  std::uint64_t unit_tokens_ = 0;
  std::vector<Origin> origins_;  // one per stage

  // A row's stride in tokens at stage `stage` (1 without units).
  std::uint64_t stride_of(std::size_t stage) const noexcept;
  std::uint64_t batches_per_epoch(std::uint64_t global_batch, std::uint64_t stride) const noexcept;
  std::uint64_t batches_from(UnitCut from, std::uint64_t global_batch, std::uint64_t stride) const noexcept;
  EpochPoint walk(const Origin& origin, std::uint64_t steps, std::uint64_t stride) const noexcept;
  Origin origin_at(const EpochPoint& point, std::uint64_t stride) const noexcept;
};

// Epochs of documents cut at the lengths of the global rows they fall on (above).
class CutEpochs {
 public:
  // The rows of an epoch cut at block size T throughout (order independent).
  using RowsAt = std::function<std::uint64_t(std::uint64_t block_size)>;
  // The rows of epoch `epoch` cut from global row `first_row` on (its order cut).
  using RowsOf = std::function<std::uint64_t(std::uint64_t epoch, std::uint64_t first_row)>;
  // Counts the epochs that cross a change of stage by `rows_of` (which is not kept).
  // Throws Error(config) when an epoch forms no batch (with drop_last, a stage's global
  // batch above the rows of an epoch; check first with first_stage_short()).
  CutEpochs(ShapeSchedule schedule, bool drop_last, const RowsAt& rows_at, const RowsOf& rows_of);

  // The first stage (by index) whose global batch exceeds, with drop_last, the rows of an
  // epoch cut at the longest block size (the fewest any epoch can have), or nullopt.
  static std::optional<std::size_t> first_stage_short(const ShapeSchedule& schedule, bool drop_last,
                                                      const RowsAt& rows_at);

  const ShapeSchedule& schedule() const noexcept { return schedule_; }
  // Batch `step`'s epoch, batch in it, and first row in the epoch's rows.
  EpochPoint at(std::uint64_t step) const;
  std::uint64_t first_step_of(std::uint64_t epoch) const;
  // G_e: the global row where epoch `epoch` starts (its row r has block size T(G_e + r)).
  std::uint64_t first_row_of(std::uint64_t epoch) const { return schedule_.rows_before(first_step_of(epoch)); }
  // R_e: the rows of epoch `epoch` (its drop_last remainder included).
  std::uint64_t rows_in_epoch(std::uint64_t epoch) const { return run_of_epoch(epoch).rows; }
  std::uint64_t batches_in_epoch(std::uint64_t epoch) const { return run_of_epoch(epoch).batches; }
  // Rows epoch `epoch` delivers over all ranks (fill rows aside; the drop_last remainder
  // skipped).
  std::uint64_t samples_in_epoch(std::uint64_t epoch) const;

 private:
  // `epochs` (nullopt: for ever) consecutive epochs of `batches` batches and `rows` rows
  // each, the first of them epoch `first_epoch` from step `first_step` on.
  struct Run {
    std::uint64_t first_epoch = 0;
    std::uint64_t first_step = 0;
    std::optional<std::uint64_t> epochs;
    std::uint64_t batches = 1;
    std::uint64_t rows = 0;
  };
  ShapeSchedule schedule_;
  bool drop_last_;
  std::vector<Run> runs_;

  const Run& run_of_epoch(std::uint64_t epoch) const noexcept;
};

}  // namespace tokenfeed
