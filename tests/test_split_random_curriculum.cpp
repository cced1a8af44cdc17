// sft_episode with truncation=split and batch_sampling_mode=random under a sequence-length
// curriculum (shape_schedule stages of different block_size): the loader's rows against a
// reference written here. Global row g of a step of block size T draws u uniform in
// [0, N_T) from the counter-based generator at counter g, N_T the pieces of T + 1 tokens the
// documents are cut into (each piece starting T tokens after the previous one's start), and
// holds piece u of the pieces listed document after document (docs/schedules.md, "Random
// draws"). Checked: every row's document, first token and fields at its own length on 1, 2
// and 4 ranks, each stage the unscheduled random stream at its length, one length the
// stream of today, resume at every step and elastic resume across the boundaries, and the
// schedule's report.
#include <doctest/doctest.h>

#include <memory>
#include <set>
#include <utility>

#include "inspect/shape_schedule_report.hpp"
#include "sampling/numpy_random.hpp"
#include "curriculum_support.hpp"
#include "test_support.hpp"
#include "tokenfeed/loader.hpp"
#include "util/hash.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

constexpr std::uint32_t kSeed = 5;
constexpr std::size_t kDocuments = 12;
constexpr std::int64_t kKeyBlock = 16;

// Documents of 2 to 60 tokens.
struct Dataset : CurriculumDocuments {
  Dataset() : CurriculumDocuments(kDocuments, 60, 11) {}
};

// 3 steps of 4 rows of 16 positions (the key's block size), 4 steps of 8 rows of 8, then 8
// rows of 24 for ever.
const RefSchedule kSchedule({{3, 4, 16}, {7, 8, 8}, {0, 8, 24}});

// The random-mode generator of split "train" at epoch_seed kSeed (keyed on both).
CounterRng train_rng() {
  Hasher key;
  key.add(std::uint64_t{kSeed});
  key.add(std::string_view("train"));
  return CounterRng(key.digest());
}

// The reference stream of global rows under `schedule`: row g at block size T lists the
// pieces of every document (in id order) cut from token 0, a piece holding T + 1 tokens from
// its first and the next starting T tokens on (no piece of one token), and takes the one the
// generator draws at counter g among them.
std::vector<SplitRow> reference_rows(const Dataset& data, const RefSchedule& schedule, std::uint64_t steps) {
  const CounterRng rng = train_rng();
  std::vector<SplitRow> rows;
  for (std::uint64_t g = 0; g < schedule.rows_before(steps); ++g) {
    const std::uint64_t T = schedule.stage_at(schedule.step_of_row(g)).block_size;
    std::vector<std::pair<std::size_t, std::size_t>> pieces;  // (document, first token)
    for (std::size_t d = 0; d < kDocuments; ++d) {
      for (std::size_t o = 0; o + 1 < data.docs[d].tokens.size(); o += T) pieces.emplace_back(d, o);
    }
    const auto [d, o] = pieces.at(rng.uniform(g, pieces.size()));
    const std::size_t n = data.docs[d].tokens.size();
    rows.push_back(SplitRow{T, static_cast<std::int64_t>(d), o, std::min<std::size_t>(n - 1 - o, T), 0});
  }
  return rows;
}

Config random_config(const Dataset& data, const RefSchedule& schedule, std::int64_t world, std::int64_t rank) {
  Config c = curriculum_rank_config(data.dir.path(), kKeyBlock, schedule, kSeed, true, world, rank);
  c.dataset_mode = DatasetMode::sft_episode;
  c.truncation = Truncation::split;
  c.batch_sampling_mode = SamplingMode::random;
  return c;
}

std::vector<std::unique_ptr<Loader>> open_ranks(const Dataset& data, const RefSchedule& schedule, std::int64_t world) {
  return open_loaders(world, [&](std::int64_t r) { return random_config(data, schedule, world, r); });
}

// The rows of an unscheduled single-rank run at block size `T`, `rows` rows a step.
std::vector<SplitRow> unscheduled_rows(const Dataset& data, std::uint64_t T, std::uint64_t rows, std::uint64_t steps) {
  const RefSchedule constant({{0, rows, T}});
  std::vector<std::unique_ptr<Loader>> ranks;
  Config c = random_config(data, constant, 1, 0);
  c.shape_schedule.clear();
  c.block_size = static_cast<std::int64_t>(T);
  c.batch_size = static_cast<std::int64_t>(rows);
  ranks.push_back(std::make_unique<Loader>(c));
  return take_split_rows(data.docs, ranks, steps, constant);
}

constexpr std::uint64_t kSteps = 14;

}  // namespace

TEST_CASE(
    "random split curriculum: each row is the piece drawn at counter g among the pieces at its step's length, as the "
    "reference, on 1, 2 and 4 ranks" *
    doctest::timeout(300)) {
  const Dataset data;
  const std::vector<SplitRow> want = reference_rows(data, kSchedule, kSteps);
  // Every length is read, and at each some document is cut into several pieces.
  std::set<std::uint64_t> lengths, cut;
  for (const SplitRow& r : want) {
    lengths.insert(r.T);
    if (r.first > 0) cut.insert(r.T);
  }
  REQUIRE(lengths == std::set<std::uint64_t>{8, 16, 24});
  REQUIRE(cut == lengths);
  for (const std::int64_t world : {1, 2, 4}) {
    CAPTURE(world);
    auto ranks = open_ranks(data, kSchedule, world);
    CHECK(take_split_rows(data.docs, ranks, kSteps, kSchedule) == want);
  }
  // Each stage's rows are the unscheduled random stream's rows at its length (the same
  // global rows g), and the first stage, at the key's block size, today's batches.
  for (const RefStage& stage : kSchedule.stages()) {
    CAPTURE(stage.block_size);
    const std::vector<SplitRow> single = unscheduled_rows(data, stage.block_size, 1, kSchedule.rows_before(kSteps));
    for (std::size_t g = 0; g < want.size(); ++g) {
      if (want[g].T == stage.block_size) CHECK(single[g] == want[g]);
    }
  }
  const std::vector<SplitRow> today = unscheduled_rows(data, kKeyBlock, 4, 3);
  CHECK(today == std::vector<SplitRow>(want.begin(), want.begin() + 12));
}

TEST_CASE("random split curriculum: stages of one length give the unscheduled stream in sequence, bit for bit" *
          doctest::timeout(300)) {
  const Dataset data;
  const RefSchedule warmup({{3, 4, 16}, {7, 8, 16}, {0, 2, 16}});
  const std::uint64_t rows = warmup.rows_before(kSteps);
  const std::vector<SplitRow> single = unscheduled_rows(data, kKeyBlock, 1, rows);
  CHECK(single == reference_rows(data, warmup, kSteps));
  auto ranks = open_ranks(data, warmup, 1);
  CHECK(take_split_rows(data.docs, ranks, kSteps, warmup) == single);
  // Every field of every row equal to the single-row stream's.
  Config c = random_config(data, warmup, 1, 0);
  c.shape_schedule.clear();
  Loader one(c);
  Loader scheduled(random_config(data, warmup, 1, 0));
  for (std::uint64_t step = 0; step < kSteps; ++step) {
    const Batch b = scheduled.get_batch();
    for (std::size_t r = 0; r < b.rows(); ++r) {
      const Batch s = one.get_batch();
      CAPTURE(step);
      CAPTURE(r);
      const auto row = [r](auto span) { return std::vector(span.begin() + r * 16, span.begin() + (r + 1) * 16); };
      const auto all = [](auto span) { return std::vector(span.begin(), span.end()); };
      CHECK(row(b.tokens()) == all(s.tokens()));
      CHECK(row(b.y()) == all(s.y()));
      CHECK(row(b.labels()) == all(s.labels()));
      CHECK(row(b.token_weights()) == all(s.token_weights()));
      CHECK(row(b.position_ids()) == all(s.position_ids()));
      CHECK(b.episode_ids()[r] == s.episode_ids()[0]);
    }
  }
}

TEST_CASE("random split curriculum: resume at every step on 2 ranks, and from 2 ranks onto 4 across the boundaries" *
          doctest::timeout(600)) {
  const Dataset data;
  constexpr std::uint64_t kRun = 10;
  const std::vector<SplitRow> expected = reference_rows(data, kSchedule, kRun);
  REQUIRE(expected.size() == kSchedule.rows_before(kRun));
  const auto open = [&](std::int64_t world) { return open_ranks(data, kSchedule, world); };
  const auto read = [&](auto& ranks, std::uint64_t steps) {
    return take_split_rows(data.docs, ranks, steps, kSchedule);
  };
  // Boundaries at steps 3 and 7.
  check_resumes(open, read, expected, kSchedule, kRun, kRun, 2, {2, 3, 4, 6, 7, 8});
}

TEST_CASE("random split curriculum: the schedule's report reaches each stage at its step") {
  const Dataset data;
  const ShapeScheduleReport report = shape_schedule_report(random_config(data, kSchedule, 1, 0), 20, "steps");
  REQUIRE(report.stages.size() == kSchedule.stages().size());
  for (std::size_t i = 0; i < report.stages.size(); ++i) {
    CAPTURE(i);
    const ShapeStageFigures& stage = report.stages[i];
    CHECK(stage.block_size == kSchedule.stages()[i].block_size);
    CHECK(stage.rows_before == kSchedule.rows_before(stage.first_step));
    REQUIRE(stage.reached);
    CHECK(!stage.reached->epoch);
    CHECK(stage.reached->batch_in_epoch == stage.first_step);
  }
}
