// MixtureSchedule: which source each global row of a mixture comes from, and which row of
// that source's own stream it is.
//
// Global rows are numbered in step order: the rows before step s are the step axis's
// rows_before(s) (a ShapeSchedule: a constant batch_size * world_size a step, or a
// batch-size schedule's sizes), and row i of step s is global row rows_before(s) + i (rank r
// holds i in [r * B_s, (r + 1) * B_s), B_s its rows at step s). A stage's first row is
// rows_before(its first step). Within a stage,
// rows are assigned by smooth weighted round-robin over the stage's weights: at each pick
// every source's `current += weight`, the source with the largest `current` wins (ties to
// the earliest declared) and the winner's `current -= total`; the round-robin restarts at
// each stage's first row. A source's k-th row over the whole run (all stages, all ranks)
// is row k of its own stream.
//
// Exactness without replay: weights are exact decimals, scaled to integers by a power of
// ten and reduced by their gcd (the round-robin over c * w picks the same sources as over w,
// since every `current` scales by c). After `total` picks every source has won exactly its
// weight and every `current` is 0 again, so the sequence is periodic with period `total`;
// one period is stored (or, for a stage that ends sooner, as weight changes make, only its
// rows), and row g's source and index follow from g's place in it in O(log weight).
//
// Thread-safety: immutable after construction; every member may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sampling/shape_schedule.hpp"

namespace tokenfeed {

// A weight written as a non-negative decimal: value = mantissa / 10^decimals. nullopt for
// text that is not one (a sign, an exponent, more than 6 decimals, more than 9 digits
// before the point).
struct ExactWeight {
  std::uint64_t mantissa = 0;
  int decimals = 0;
};
std::optional<ExactWeight> parse_mixture_weight(std::string_view text);

class MixtureSchedule {
 public:
  // The longest period (sum of a stage's reduced integer weights) allowed: one period is
  // stored (12 bytes per pick).
  static constexpr std::uint64_t kMaxPeriod = std::uint64_t{1} << 22;

  struct StageSpec {
    std::vector<std::string> weights;    // one per source, as text
    std::optional<std::uint64_t> until;  // exclusive end step; absent on the last stage
  };

  // Throws Error(config) naming the source or stage for a malformed weight, a stage whose
  // weights are all zero, a period above kMaxPeriod, or stage ends that do not increase.
  // `stage_names` name the stages in errors ("mixture stage N" for those it lacks).
  // `steps`: the step axis, the global rows of each step (a batch-size schedule, or one
  // constant size). `reuse`: a schedule of the same names and step axis whose leading stages
  // this one shares where they are the same (a weight change rebuilds the schedule, and only
  // the stages from its step on differ), instead of computing them again.
  // REQUIRES: names.size() == every stage's weights.size().
  MixtureSchedule(std::vector<std::string> names, std::vector<StageSpec> stages, ShapeSchedule steps,
                  const std::vector<std::string>& stage_names = {}, const MixtureSchedule* reuse = nullptr);
  // The same at a constant `rows_per_step` (> 0) rows a step.
  MixtureSchedule(std::vector<std::string> names, std::vector<StageSpec> stages, std::uint64_t rows_per_step,
                  const std::vector<std::string>& stage_names = {}, const MixtureSchedule* reuse = nullptr)
      : MixtureSchedule(std::move(names), std::move(stages), ShapeSchedule::constant(rows_per_step), stage_names,
                        reuse) {}

  struct Pick {
    std::uint32_t source = 0;
    std::uint64_t index = 0;  // the row of the source's own stream
  };
  Pick pick(std::uint64_t global_row) const noexcept;
  // Rows of `source` among global rows [0, global_row).
  std::uint64_t rows_before(std::uint32_t source, std::uint64_t global_row) const noexcept;

  // The step axis: the global rows before each step (steps().rows_before(s)) and of each step.
  const ShapeSchedule& steps() const noexcept { return steps_; }

  std::size_t sources() const noexcept { return names_.size(); }
  std::size_t stages() const noexcept { return stages_.size(); }
  std::size_t stage_of_step(std::uint64_t step) const noexcept;
  std::uint64_t stage_first_step(std::size_t stage) const noexcept { return stages_[stage]->first_step; }
  // The stage's weights in lowest integer terms (the round-robin's), and as written.
  const std::vector<std::uint64_t>& stage_weights(std::size_t stage) const noexcept { return stages_[stage]->weights; }
  const std::vector<std::string>& stage_weight_texts(std::size_t stage) const noexcept { return stages_[stage]->texts; }

 private:
  struct Stage {
    std::uint64_t first_step = 0;
    std::uint64_t first_row = 0;
    std::optional<std::uint64_t> until;
    std::vector<std::string> texts;
    std::vector<std::uint64_t> weights;                 // reduced integers
    std::uint64_t total = 0;                            // the period
    std::vector<std::uint32_t> sequence;                // one period: the source of each pick
    std::vector<std::vector<std::uint32_t>> positions;  // per source: its picks' places in a period
    std::vector<std::uint64_t> base;                    // per source: its rows before this stage
  };
  std::size_t stage_of_row(std::uint64_t global_row) const noexcept;
  std::uint64_t rows_in_stage(const Stage& stage, std::uint32_t source, std::uint64_t local_row) const noexcept;

  std::vector<std::string> names_;
  ShapeSchedule steps_;
  std::vector<std::shared_ptr<const Stage>> stages_;  // shared with the schedule it reused, if any
};

}  // namespace tokenfeed
