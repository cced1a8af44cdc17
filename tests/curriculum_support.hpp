// What the sequence-length curriculum tests share: a shape schedule written out for their
// reference walks (its stages as (end step, global batch, block size), and which stage a
// step is in, the rows before a step and the step holding a row, counted step by step: no
// use of the loader's ShapeSchedule, which the tests check), and the opening and resuming
// of a run's data-parallel ranks.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "test_support.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"

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

// Rank `rank` of `world` in a run over the episode dataset `dir` (uint32 tokens, masks
// used) under `schedule`, from `block_size` (the key), with `seed` and `drop_last`; two
// decode threads, a prefetch depth of 3. The mode and its keys are the caller's.
inline Config curriculum_rank_config(const std::filesystem::path& dir, std::int64_t block_size,
                                     const RefSchedule& schedule, std::uint32_t seed, bool drop_last,
                                     std::int64_t world, std::int64_t rank) {
  Config c = make_config(dir, 1, block_size);
  c.use_loss_mask = true;
  c.token_dtype = TokenDtype::uint32;
  c.epoch_drop_last = drop_last;
  c.epoch_seed = seed;
  c.world_size = world;
  c.rank = rank;
  c.decode_threads = 2;
  c.prefetch_depth = 3;
  c.shape_schedule = schedule.shape_stages();
  return c;
}

// The loaders of data-parallel ranks 0..world-1 of one run, rank r's over config_of(r).
template <typename ConfigOf>
std::vector<std::unique_ptr<Loader>> open_loaders(std::int64_t world, ConfigOf&& config_of) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (std::int64_t r = 0; r < world; ++r) ranks.push_back(std::make_unique<Loader>(config_of(r)));
  return ranks;
}

// Reads the next `steps` steps of `ranks` (rank order within a step), checks each batch's
// shape against batch_shape() and the schedule's, and hands it to `on_batch`.
template <typename OnBatch>
void read_steps(std::vector<std::unique_ptr<Loader>>& ranks, std::uint64_t steps, const RefSchedule& schedule,
                OnBatch&& on_batch) {
  for (std::uint64_t s = 0; s < steps; ++s) {
    for (auto& loader : ranks) {
      const Batch b = loader->get_batch();
      const StepShape shape = loader->batch_shape("train", b.step());
      REQUIRE(b.rows() == shape.rows);
      REQUIRE(b.cols() == shape.cols);
      REQUIRE(b.cols() == schedule.stage_at(b.step()).block_size);
      REQUIRE(b.rows() * ranks.size() == schedule.stage_at(b.step()).global_batch);
      on_batch(b);
    }
  }
}

// A run resumed after `at` steps: `open(world)` opens a run's ranks and `take(ranks, steps)`
// reads steps from them; a run on `saved_world` ranks reads `at` steps and saves rank 0's
// state, which each of `world` fresh ranks loads.
template <typename Open, typename Take>
std::vector<std::unique_ptr<Loader>> resumed_after(Open&& open, Take&& take, std::uint64_t at, std::int64_t saved_world,
                                                   std::int64_t world) {
  std::string state;
  {
    auto first = open(saved_world);
    (void)take(first, at);
    state = first[0]->save_state();
  }
  auto resumed = open(world);
  for (auto& loader : resumed) loader->load_state(state);
  return resumed;
}

}  // namespace tokenfeed::test
