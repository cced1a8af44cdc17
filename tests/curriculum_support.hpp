// What the sequence-length curriculum tests share: a shape schedule written out for their
// reference walks (its stages as (end step, global batch, block size), and which stage a
// step is in, the rows before a step and the step holding a row, counted step by step: no
// use of the loader's ShapeSchedule, which the tests check), the opening and resuming of a
// run's data-parallel ranks, and sft_episode's truncation=split rows read back and checked.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <ostream>
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

// `count` documents of 2 to `max_len` tokens (random_episodes: token = 1000 * id + position
// + 1, a random mask), written as an episode split "train" of uint32 tokens with masks in 2
// shards.
struct CurriculumDocuments {
  TempDir dir;
  std::vector<TestEpisode> docs;
  CurriculumDocuments(std::size_t count, std::size_t max_len, std::uint32_t seed)
      : docs(random_episodes(count, max_len, seed)) {
    write_split(dir.path(), "train", docs, TokenDtype::uint32, true, 2);
  }
};

// One sft_episode row with truncation=split: its length, its document (-1: a fill row), the
// first token it holds and its input positions that have a target (the row holds tokens
// [first, first + positions]), and its epoch (0 in random mode).
struct SplitRow {
  std::uint64_t T = 0;
  std::int64_t doc = -1;
  std::size_t first = 0, positions = 0;
  std::uint64_t epoch = 0;
  bool operator==(const SplitRow&) const = default;
};

inline std::ostream& operator<<(std::ostream& os, const SplitRow& r) {
  return os << "T" << r.T << "[doc " << r.doc << " from " << r.first << " +" << r.positions << " e" << r.epoch << "]";
}

// Row r of `b` read back as a SplitRow (its document from episode_ids, its first token from
// its first input, its length from its position_ids, which restart at 0 in the padding),
// every field checked against that document's tokens and mask. `docs`: the documents as
// random_episodes() makes them (token = 1000 * id + position + 1), with masks.
inline SplitRow checked_split_row(const std::vector<TestEpisode>& docs, const Batch& b, std::size_t r) {
  const std::size_t T = b.cols();
  const std::size_t at = r * T;
  SplitRow row{T, b.episode_ids()[r], 0, 0, b.epoch()};
  if (row.doc >= 0) {
    const TestEpisode& d = docs.at(static_cast<std::size_t>(row.doc));
    row.first = static_cast<std::size_t>(b.tokens()[at] - (1000 * row.doc + 1));
    row.positions = 1;
    while (row.positions < T && b.position_ids()[at + row.positions] != 0) ++row.positions;
    CAPTURE(row);
    REQUIRE(row.first + row.positions < d.tokens.size());
    for (std::size_t i = 0; i < row.positions; ++i) {
      const std::size_t p = row.first + i;
      const float w = static_cast<float>(d.mask[p + 1]);
      CHECK(b.tokens()[at + i] == d.tokens[p]);
      CHECK(b.y()[at + i] == d.tokens[p + 1]);
      CHECK(b.token_weights()[at + i] == w);
      CHECK(b.labels()[at + i] == (w != 0.0f ? static_cast<std::int64_t>(d.tokens[p + 1]) : -100));
      CHECK(b.position_ids()[at + i] == static_cast<std::int32_t>(i));
    }
    // The padding rule: x keeps the row's last token in the first padding position.
    if (row.positions < T) CHECK(b.tokens()[at + row.positions] == d.tokens[row.first + row.positions]);
  }
  for (std::size_t i = row.positions; i < T; ++i) {
    if (i > row.positions || row.doc < 0) CHECK(b.tokens()[at + i] == 0);
    CHECK(b.labels()[at + i] == -100);
    CHECK(b.token_weights()[at + i] == 0.0f);
    CHECK(b.position_ids()[at + i] == static_cast<std::int32_t>(i - row.positions));
  }
  CHECK(b.segments().empty());
  return row;
}

// The split rows of the next `steps` steps over `ranks` (rank order within a step), each
// batch's shape that of batch_shape() and `schedule`'s, its cu_seqlens one sequence per real
// row and one for its padding.
inline std::vector<SplitRow> take_split_rows(const std::vector<TestEpisode>& docs,
                                             std::vector<std::unique_ptr<Loader>>& ranks, std::uint64_t steps,
                                             const RefSchedule& schedule) {
  std::vector<SplitRow> rows;
  read_steps(ranks, steps, schedule, [&](const Batch& b) {
    std::vector<std::int32_t> bounds{0};
    for (std::size_t r = 0; r < b.rows(); ++r) {
      const SplitRow row = checked_split_row(docs, b, r);
      if (row.positions > 0) bounds.push_back(static_cast<std::int32_t>(r * b.cols() + row.positions));
      if (row.positions < b.cols()) bounds.push_back(static_cast<std::int32_t>((r + 1) * b.cols()));
      rows.push_back(row);
    }
    CHECK(std::vector<std::int32_t>(b.cu_seqlens().begin(), b.cu_seqlens().end()) == bounds);
  });
  return rows;
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

// The resume checks of a curriculum run, whose uninterrupted global rows `expected` cover at
// least its first `steps` steps: a run saved after each step before `resume_before` on
// `world` ranks and resumed on as many, and one saved after each step of `elastic` on 2
// ranks and resumed on 4, must read the rest of those rows. `open` and `read` as
// resumed_after's.
template <typename Row, typename Open, typename Read>
void check_resumes(Open&& open, Read&& read, const std::vector<Row>& expected, const RefSchedule& schedule,
                   std::uint64_t steps, std::uint64_t resume_before, std::int64_t world,
                   std::initializer_list<std::uint64_t> elastic) {
  const std::uint64_t end = schedule.rows_before(steps);
  REQUIRE(expected.size() >= end);
  const auto rest = [&](std::uint64_t at) {
    return std::vector<Row>(expected.begin() + static_cast<std::ptrdiff_t>(schedule.rows_before(at)),
                            expected.begin() + static_cast<std::ptrdiff_t>(end));
  };
  for (std::uint64_t at = 0; at < resume_before; ++at) {
    CAPTURE(at);
    auto resumed = resumed_after(open, read, at, world, world);
    CHECK(read(resumed, steps - at) == rest(at));
  }
  for (const std::uint64_t at : elastic) {
    CAPTURE(at);
    auto resumed = resumed_after(open, read, at, 2, 4);
    CHECK(read(resumed, steps - at) == rest(at));
  }
}

}  // namespace tokenfeed::test
