// sft_episode with truncation=split under a sequence-length curriculum (shape_schedule
// stages of different block_size): the loader's rows against a reference written here, a
// walk of the numpy epoch order that cuts each document, in order, into rows of T + 1
// tokens from the token reached, T the block size of the step holding the row
// (docs/schedules.md, "The rule, exactly"). Checked: every row's document, first token and
// fields at its own length, every label position once per epoch, 1, 2 and 4 ranks,
// epoch_drop_last true and false, resume at every step and elastic resume across the
// boundaries, and the schedule's report.
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <ostream>
#include <set>

#include "inspect/shape_schedule_report.hpp"
#include "sampling/numpy_random.hpp"
#include "curriculum_support.hpp"
#include "test_support.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

constexpr std::uint32_t kSeed = 3;
constexpr std::size_t kDocuments = 12;

// Documents of 2 to 60 tokens.
struct Dataset : CurriculumDocuments {
  Dataset() : CurriculumDocuments(kDocuments, 60, 9) {}
};

// 4 steps of 4 rows of 8 positions (the key's block size), 6 steps of 8 rows of 16, then 4
// rows of 8 for ever.
const RefSchedule kSchedule({{4, 4, 8}, {10, 8, 16}, {0, 4, 8}});

using RefRow = SplitRow;

// The reference stream of global rows: epoch e starts at the step after the previous
// epoch's last batch, at global row G; its documents in numpy order are cut from token 0,
// row r holding T + 1 tokens from the token reached (T = the block size of the step holding
// global row G + r) and the next row starting T tokens on; its batches take whole global
// batches while the rows left fill one, and the remainder is skipped (drop_last) or taken
// with fill rows.
std::vector<RefRow> reference_rows(const Dataset& data, bool drop_last, std::uint64_t steps) {
  std::vector<RefRow> rows;
  for (std::uint32_t epoch = 0; rows.size() < kSchedule.rows_before(steps); ++epoch) {
    const std::uint64_t G = rows.size();
    std::vector<RefRow> cut;
    for (const std::uint64_t d : numpy_permutation(kSeed + epoch, kDocuments)) {
      const std::size_t n = data.docs[d].tokens.size();
      for (std::size_t o = 0; o + 1 < n;) {
        const std::uint64_t T = kSchedule.stage_at(kSchedule.step_of_row(G + cut.size())).block_size;
        cut.push_back(RefRow{T, static_cast<std::int64_t>(d), o, std::min<std::size_t>(n - 1 - o, T), epoch});
        o += T;
      }
    }
    std::size_t taken = 0;
    for (std::uint64_t step = kSchedule.step_of_row(G); taken < cut.size(); ++step) {
      const std::uint64_t B = kSchedule.stage_at(step).global_batch;
      const std::size_t take = std::min<std::size_t>(B, cut.size() - taken);
      if (take < B && drop_last) break;
      rows.insert(rows.end(), cut.begin() + static_cast<std::ptrdiff_t>(taken),
                  cut.begin() + static_cast<std::ptrdiff_t>(taken + take));
      for (std::size_t f = take; f < B; ++f)
        rows.push_back(RefRow{kSchedule.stage_at(step).block_size, -1, 0, 0, epoch});
      taken += take;
    }
  }
  rows.resize(kSchedule.rows_before(steps));
  return rows;
}

Config curriculum_config(const Dataset& data, bool drop_last, std::int64_t world, std::int64_t rank) {
  Config c = curriculum_rank_config(data.dir.path(), 8, kSchedule, kSeed, drop_last, world, rank);
  c.dataset_mode = DatasetMode::sft_episode;
  c.truncation = Truncation::split;
  return c;
}

std::vector<std::unique_ptr<Loader>> open_ranks(const Dataset& data, bool drop_last, std::int64_t world) {
  return open_loaders(world, [&](std::int64_t r) { return curriculum_config(data, drop_last, world, r); });
}

std::vector<RefRow> take(const Dataset& data, std::vector<std::unique_ptr<Loader>>& ranks, std::uint64_t steps) {
  return take_split_rows(data.docs, ranks, steps, kSchedule);
}

constexpr std::uint64_t kSteps = 40;

// Checks, from the rows alone, that each epoch trains every label position of every
// document at most once (exactly once when `complete`), each document's rows in order, each
// starting on the token where the previous one ended. Returns the epochs completed.
std::size_t check_coverage(const Dataset& data, const std::vector<RefRow>& rows, bool complete) {
  std::map<std::uint64_t, std::map<std::int64_t, std::size_t>> reached;  // epoch -> doc -> next first token
  for (const RefRow& r : rows) {
    if (r.doc < 0) continue;
    CAPTURE(r);
    std::size_t& next = reached[r.epoch][r.doc];
    CHECK(r.first == next);
    CHECK(r.positions >= 1);
    next = r.first + r.positions;
  }
  std::size_t epochs = 0;
  for (const auto& entry : reached) {
    const std::uint64_t epoch = entry.first;
    if (!reached.contains(epoch + 1)) break;  // the last epoch read may be partial
    ++epochs;
    if (!complete) continue;
    CAPTURE(epoch);
    CHECK(entry.second.size() == kDocuments);
    for (const auto& [doc, next] : entry.second)
      CHECK(next == data.docs[static_cast<std::size_t>(doc)].tokens.size() - 1);
  }
  return epochs;
}

}  // namespace

TEST_CASE(
    "split curriculum: rows cut each document at each row's length from the token reached, as the reference walk, "
    "every label position once per epoch, on 1, 2 and 4 ranks" *
    doctest::timeout(300)) {
  const Dataset data;
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    const std::vector<RefRow> want = reference_rows(data, drop_last, kSteps);
    // The walk crosses the boundaries inside documents and inside epochs, and reads several
    // epochs at both lengths.
    std::set<std::uint64_t> lengths;
    bool continued_across = false;
    std::map<std::int64_t, RefRow> last_of;
    for (const RefRow& r : want) {
      lengths.insert(r.T);
      if (r.doc < 0) continue;
      const auto it = last_of.find(r.doc);
      if (r.first > 0 && it != last_of.end() && it->second.T != r.T) continued_across = true;
      last_of[r.doc] = r;
    }
    REQUIRE(lengths == std::set<std::uint64_t>{8, 16});
    REQUIRE(continued_across);
    REQUIRE(want.back().epoch >= 3);
    CHECK(check_coverage(data, want, !drop_last) >= 3);
    for (const std::int64_t world : {1, 2, 4}) {
      CAPTURE(world);
      auto ranks = open_ranks(data, drop_last, world);
      const std::vector<RefRow> got = take(data, ranks, kSteps);
      CHECK(got == want);
      CHECK(check_coverage(data, got, !drop_last) >= 3);
    }
  }
}

TEST_CASE("split curriculum: resume at every step, and from 2 ranks onto 4 across the boundaries" *
          doctest::timeout(600)) {
  const Dataset data;
  constexpr std::uint64_t kRun = 16;
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    const std::vector<RefRow> expected = reference_rows(data, drop_last, kRun);
    REQUIRE(expected.size() == kSchedule.rows_before(kRun));
    const auto open = [&](std::int64_t world) { return open_ranks(data, drop_last, world); };
    const auto read = [&](auto& ranks, std::uint64_t steps) { return take(data, ranks, steps); };
    // Boundaries at steps 4 and 10.
    check_resumes(open, read, expected, kSchedule, kRun, kRun, 1, {3, 4, 5, 9, 10, 11});
  }
}

TEST_CASE("split curriculum: the schedule's report gives each stage's first epoch, and a stage too large refused") {
  const Dataset data;
  const std::vector<RefRow> rows = reference_rows(data, true, kSteps);
  const ShapeScheduleReport report = shape_schedule_report(curriculum_config(data, true, 1, 0), kSteps, "steps");
  REQUIRE(report.stages.size() == kSchedule.stages().size());
  for (std::size_t i = 0; i < report.stages.size(); ++i) {
    CAPTURE(i);
    const ShapeStageFigures& stage = report.stages[i];
    CHECK(stage.block_size == kSchedule.stages()[i].block_size);
    REQUIRE(stage.reached);
    const std::uint64_t first_row = kSchedule.rows_before(stage.first_step);
    CHECK(stage.reached->epoch == rows[first_row].epoch);
    // The batch in epoch: the steps since the epoch's first row.
    std::uint64_t epoch_start = first_row;
    while (epoch_start > 0 && rows[epoch_start - 1].epoch == rows[first_row].epoch) --epoch_start;
    CHECK(stage.reached->batch_in_epoch == stage.first_step - kSchedule.step_of_row(epoch_start));
  }
  // With drop_last, a global batch above an epoch's rows at the longest length never forms.
  Config c = curriculum_config(data, true, 1, 0);
  std::vector<ShapeStage> stages = kSchedule.shape_stages();
  stages[1].global_batch_size = 4096;
  c.shape_schedule = stages;
  const std::string why = error_of([&] { Loader{c}; });
  CHECK(why.find("12 kept episodes cut into ") != std::string::npos);
  CHECK(why.find(" rows at the longest block_size 16 (truncation=split), fewer than the global batch of "
                 "shape_schedule stage 1 (4096 rows)") != std::string::npos);
}
