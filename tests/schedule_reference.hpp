// A shape schedule written out for the curriculum tests' reference walks: its stages as
// (end step, global batch, block size), and which stage a step is in, the rows before a
// step and the step holding a row, counted step by step (no use of the loader's
// ShapeSchedule, which the tests check).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "tokenfeed/config.hpp"

namespace tokenfeed::test {

struct RefStage {
  std::uint64_t end = 0;  // exclusive; 0: none (the last stage)
  std::uint64_t global_batch = 1, block_size = 0;
};

class RefSchedule {
 public:
  explicit RefSchedule(std::vector<RefStage> stages) : stages_(std::move(stages)) {}

  const std::vector<RefStage>& stages() const noexcept { return stages_; }

  // The config's shape_schedule.
  std::vector<ShapeStage> shape_stages() const {
    std::vector<ShapeStage> out;
    for (const RefStage& s : stages_) {
      ShapeStage stage;
      if (s.end != 0) stage.until_step = static_cast<std::int64_t>(s.end);
      stage.global_batch_size = static_cast<std::int64_t>(s.global_batch);
      stage.block_size = static_cast<std::int64_t>(s.block_size);
      out.push_back(stage);
    }
    return out;
  }

  const RefStage& stage_at(std::uint64_t step) const {
    for (const RefStage& s : stages_) {
      if (s.end == 0 || step < s.end) return s;
    }
    return stages_.back();
  }

  std::uint64_t rows_before(std::uint64_t step) const {
    std::uint64_t rows = 0;
    for (std::uint64_t s = 0; s < step; ++s) rows += stage_at(s).global_batch;
    return rows;
  }

  std::uint64_t step_of_row(std::uint64_t row) const {
    std::uint64_t step = 0;
    while (rows_before(step + 1) <= row) ++step;
    return step;
  }

 private:
  std::vector<RefStage> stages_;
};

}  // namespace tokenfeed::test
