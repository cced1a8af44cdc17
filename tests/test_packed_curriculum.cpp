// sft_packed under a sequence-length curriculum (shape_schedule stages of different
// block_size): the loader's rows against a reference written here, a plain lookahead
// best-fit packer over the numpy epoch order whose row capacity is the block size of the
// step holding the row (docs/schedules.md, "The rule, exactly"). Checked: the episode ids
// of every row, each episode once per epoch, every row's fields at its own length, 1, 2
// and 4 ranks, resume at every step and elastic resume across a boundary, context-parallel
// padding and split, and balance_ranks=attention (truncation=split:
// tests/test_packed_split_curriculum.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "inspect/shape_schedule_report.hpp"
#include "sampling/numpy_random.hpp"
#include "curriculum_support.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

constexpr std::uint32_t kSeed = 11;
constexpr std::size_t kEpisodes = 40;
constexpr std::int64_t kLookahead = 8;

// Episodes of 2 to 50 tokens, token = 1000 * id + position + 1, a random mask.
struct Dataset {
  TempDir dir;
  std::vector<TestEpisode> episodes = random_episodes(kEpisodes, 50, 5);
  Dataset() { write_split(dir.path(), "train", episodes, TokenDtype::uint32, true, 2); }
};

// The schedule: 3 steps of 4 rows of 32 positions (the key's), 4 steps of 8 rows of 64, then
// 4 rows of 16 for ever.
const RefSchedule kSchedule({{3, 4, 32}, {7, 8, 64}, {0, 4, 16}});

// One row of the stream: its length, its episodes in order (none: a fill row), its epoch.
struct RefRow {
  std::uint64_t T = 0;
  std::vector<std::int64_t> ids;
  bool operator==(const RefRow&) const = default;
};

std::ostream& operator<<(std::ostream& os, const RefRow& r) {
  os << "T" << r.T << "[";
  for (const std::int64_t id : r.ids) os << id << " ";
  return os << "]";
}

// The reference stream of global rows: each epoch's numpy order packed from global row G on,
// row g holding block_size(kSchedule.step_of_row(g)) positions, an episode of n tokens kept to
// min(n, T + 1) and occupying its positions rounded up to `multiple`.
// `epochs`, when given, receives each row's epoch.
std::vector<RefRow> reference_rows(const Dataset& data, bool drop_last, std::size_t rows_wanted,
                                   std::uint64_t multiple = 1, std::vector<std::uint64_t>* epochs = nullptr) {
  const auto occupied = [&](std::int64_t id, std::uint64_t T) {
    const std::uint64_t n = std::min<std::uint64_t>(data.episodes[static_cast<std::size_t>(id)].tokens.size(), T + 1);
    return (n - 1 + multiple - 1) / multiple * multiple;
  };
  std::vector<RefRow> rows;
  for (std::uint32_t epoch = 0; rows.size() < rows_wanted; ++epoch) {
    const std::vector<std::uint64_t> order = numpy_permutation(kSeed + epoch, kEpisodes);
    std::vector<std::int64_t> window;
    std::size_t next = 0;
    const auto refill = [&] {
      while (window.size() < static_cast<std::size_t>(kLookahead) && next < order.size())
        window.push_back(static_cast<std::int64_t>(order[next++]));
    };
    refill();
    while (!window.empty()) {
      RefRow row;
      row.T = kSchedule.stage_at(kSchedule.step_of_row(rows.size())).block_size;
      std::uint64_t free = row.T - occupied(window.front(), row.T);
      row.ids.push_back(window.front());
      window.erase(window.begin());
      refill();
      for (;;) {
        std::size_t best = window.size();
        for (std::size_t i = 0; i < window.size(); ++i) {
          const std::uint64_t o = occupied(window[i], row.T);
          if (o <= free && (best == window.size() || o > occupied(window[best], row.T))) best = i;
        }
        if (best == window.size()) break;
        free -= occupied(window[best], row.T);
        row.ids.push_back(window[best]);
        window.erase(window.begin() + static_cast<std::ptrdiff_t>(best));
        refill();
      }
      rows.push_back(row);
      if (epochs != nullptr) epochs->push_back(epoch);
    }
    if (!drop_last) {  // the epoch's last batch completed with fill rows
      const std::uint64_t end = kSchedule.rows_before(kSchedule.step_of_row(rows.size() - 1) + 1);
      while (rows.size() < end) {
        rows.push_back(RefRow{kSchedule.stage_at(kSchedule.step_of_row(rows.size())).block_size, {}});
        if (epochs != nullptr) epochs->push_back(epoch);
      }
    }
  }
  return rows;
}

Config curriculum_config(const Dataset& data, bool drop_last, std::int64_t world, std::int64_t rank) {
  Config c = curriculum_rank_config(data.dir.path(), 32, kSchedule, kSeed, drop_last, world, rank);
  c.dataset_mode = DatasetMode::sft_packed;
  c.pack_lookahead = kLookahead;
  return c;
}

std::vector<std::unique_ptr<Loader>> open_ranks(const Dataset& data, bool drop_last, std::int64_t world) {
  return open_loaders(world, [&](std::int64_t r) { return curriculum_config(data, drop_last, world, r); });
}

// Checks a row's fields against its episodes kept at the row's length (no context
// parallelism) and returns it as a RefRow.
RefRow checked_row(const Dataset& data, const Batch& b, std::size_t r) {
  const std::size_t T = b.cols();
  RefRow row{T, {}};
  std::vector<bool> covered(T, false);
  for (const PackedSegment& s : b.segments()) {
    if (s.row != r) continue;
    const TestEpisode& e = data.episodes.at(static_cast<std::size_t>(s.episode));
    const std::size_t n = std::min(e.tokens.size(), T + 1);  // truncation=right at this row's length
    CAPTURE(s.episode);
    REQUIRE(s.positions == n - 1);
    REQUIRE(s.column + s.positions <= T);
    for (std::size_t i = 0; i < s.positions; ++i) {
      const std::size_t at = r * T + s.column + i;
      covered[s.column + i] = true;
      const float w = static_cast<float>(e.mask[i + 1]);
      CHECK(b.tokens()[at] == e.tokens[i]);
      CHECK(b.token_weights()[at] == w);
      CHECK(b.labels()[at] == (w != 0.0f ? static_cast<std::int64_t>(e.tokens[i + 1]) : -100));
      CHECK(b.position_ids()[at] == static_cast<std::int32_t>(i));
    }
    row.ids.push_back(s.episode);
  }
  for (std::size_t p = 0; p < T; ++p) {
    if (covered[p]) continue;
    CHECK(b.tokens()[r * T + p] == 0);
    CHECK(b.labels()[r * T + p] == -100);
    CHECK(b.token_weights()[r * T + p] == 0.0f);
  }
  CHECK(b.episode_ids()[r] == (row.ids.empty() ? -1 : row.ids.front()));
  return row;
}

// The rows of the next `steps` steps over `ranks` (rank order within a step), each batch's
// shape that of batch_shape() and the schedule's.
std::vector<RefRow> take(const Dataset& data, std::vector<std::unique_ptr<Loader>>& ranks, std::uint64_t steps) {
  std::vector<RefRow> rows;
  read_steps(ranks, steps, kSchedule, [&](const Batch& b) {
    for (std::size_t r = 0; r < b.rows(); ++r) rows.push_back(checked_row(data, b, r));
  });
  return rows;
}

constexpr std::uint64_t kSteps = 30;

}  // namespace

TEST_CASE(
    "packed curriculum: rows equal the reference packer at each row's length, each episode once per epoch, "
    "on 1, 2 and 4 ranks" *
    doctest::timeout(300)) {
  const Dataset data;
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    const std::vector<RefRow> expected = reference_rows(data, drop_last, kSchedule.rows_before(kSteps));
    const std::vector<RefRow> want(expected.begin(),
                                   expected.begin() + static_cast<std::ptrdiff_t>(kSchedule.rows_before(kSteps)));
    // More than one epoch, and rows of every length.
    std::set<std::uint64_t> lengths;
    std::size_t episodes = 0;
    for (const RefRow& r : want) {
      lengths.insert(r.T);
      episodes += r.ids.size();
    }
    REQUIRE(episodes > 2 * kEpisodes);
    REQUIRE(lengths == std::set<std::uint64_t>{16, 32, 64});
    for (const std::int64_t world : {1, 2, 4}) {
      CAPTURE(world);
      auto ranks = open_ranks(data, drop_last, world);
      const std::vector<RefRow> got = take(data, ranks, kSteps);
      CHECK(got == want);
      // Read from the loader alone: every kEpisodes consecutive episodes of the stream are
      // one epoch, each episode once.
      std::vector<std::int64_t> stream;
      for (const RefRow& r : got) stream.insert(stream.end(), r.ids.begin(), r.ids.end());
      for (std::size_t e = 0; (e + 1) * kEpisodes <= stream.size(); ++e) {
        CAPTURE(e);
        const std::set<std::int64_t> ids(stream.begin() + static_cast<std::ptrdiff_t>(e * kEpisodes),
                                         stream.begin() + static_cast<std::ptrdiff_t>((e + 1) * kEpisodes));
        CHECK(ids.size() == kEpisodes);
      }
    }
  }
}

TEST_CASE("packed curriculum: resume at every step, and from 2 ranks onto 4 across the boundaries" *
          doctest::timeout(600)) {
  const Dataset data;
  constexpr std::uint64_t kRun = 16;
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    const std::vector<RefRow> expected = reference_rows(data, drop_last, kSchedule.rows_before(kRun));
    const auto open = [&](std::int64_t world) { return open_ranks(data, drop_last, world); };
    const auto read = [&](auto& ranks, std::uint64_t steps) { return take(data, ranks, steps); };
    // Boundaries at steps 3 and 7.
    check_resumes(open, read, expected, kSchedule, kRun, 12, 1, {2, 3, 5, 7, 9});
  }
}

TEST_CASE("packed curriculum: context-parallel padding and split per stage, and balance_ranks=attention" *
          doctest::timeout(300)) {
  const Dataset data;
  constexpr std::uint64_t kRun = 14;
  // cp = 2: each episode padded to a multiple of 4 positions, the whole rows on both ranks.
  const std::vector<RefRow> expected = reference_rows(data, true, kSchedule.rows_before(kRun), 4);
  Config whole = curriculum_config(data, true, 2, 0);
  whole.context_parallel_size = 2;
  Config split = whole;
  split.context_parallel_split = true;
  Loader padded(whole);
  std::vector<std::unique_ptr<Loader>> shares;
  for (const std::int64_t rank : {0, 1}) {
    split.rank = rank;
    shares.push_back(std::make_unique<Loader>(split));
  }
  for (std::uint64_t step = 0; step < kRun; ++step) {
    CAPTURE(step);
    const Batch b = padded.get_batch();
    const std::size_t T = kSchedule.stage_at(step).block_size;
    REQUIRE(b.cols() == T);
    std::vector<Batch> parts;
    for (auto& share : shares) parts.push_back(share->get_batch());
    for (std::size_t r = 0; r < b.rows(); ++r) {
      CAPTURE(r);
      RefRow row{T, {}};
      std::vector<std::pair<std::size_t, std::size_t>> spans;  // each sequence's padded span
      std::size_t column = 0;
      for (const PackedSegment& s : b.segments()) {
        if (s.row != r) continue;
        row.ids.push_back(s.episode);
        const TestEpisode& e = data.episodes.at(static_cast<std::size_t>(s.episode));
        CHECK(s.positions == std::min(e.tokens.size(), T + 1) - 1);
        CHECK(s.column == column);
        for (std::size_t i = 0; i < s.positions; ++i) CHECK(b.tokens()[r * T + s.column + i] == e.tokens[i]);
        const std::size_t span = (s.positions + 3) / 4 * 4;
        spans.emplace_back(column, span);
        column += span;
      }
      if (column < T) spans.emplace_back(column, T - column);
      CHECK(row == expected[kSchedule.rows_before(step) + r]);
      // Split: rank k holds chunks k and 3 - k of every sequence's span, rows of T / 2.
      for (std::size_t k = 0; k < 2; ++k) {
        const Batch& part = parts[k];
        REQUIRE(part.cols() == T / 2);
        for (const auto& [first, span] : spans) {
          const std::size_t chunk = span / 4;
          for (std::size_t i = 0; i < chunk; ++i) {
            CHECK(part.tokens()[r * (T / 2) + first / 2 + i] == b.tokens()[r * T + first + k * chunk + i]);
            CHECK(part.labels()[r * (T / 2) + first / 2 + chunk + i] ==
                  b.labels()[r * T + first + (3 - k) * chunk + i]);
          }
        }
      }
    }
  }
  // balance_ranks=attention on 2 ranks: the same rows per step, shared out differently.
  const std::vector<RefRow> plain = reference_rows(data, true, kSchedule.rows_before(kRun));
  std::vector<std::unique_ptr<Loader>> balanced;
  for (const std::int64_t rank : {0, 1}) {
    Config c = curriculum_config(data, true, 2, rank);
    c.balance_ranks = RankBalance::attention;
    balanced.push_back(std::make_unique<Loader>(c));
  }
  for (std::uint64_t step = 0; step < kRun; ++step) {
    CAPTURE(step);
    std::multiset<std::vector<std::int64_t>> got, want;
    for (auto& loader : balanced) {
      const Batch b = loader->get_batch();
      REQUIRE(b.cols() == kSchedule.stage_at(step).block_size);
      for (std::size_t r = 0; r < b.rows(); ++r) got.insert(checked_row(data, b, r).ids);
    }
    for (std::uint64_t g = kSchedule.rows_before(step); g < kSchedule.rows_before(step + 1); ++g)
      want.insert(plain[g].ids);
    CHECK(got == want);
  }
}

TEST_CASE("packed curriculum: inspect's report gives each stage's first epoch and batch in epoch") {
  const Dataset data;
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    std::vector<std::uint64_t> epochs;
    (void)reference_rows(data, drop_last, kSchedule.rows_before(10), 1, &epochs);
    // The epoch of a step is its first row's; its batch in epoch counts the earlier steps
    // whose first row is in the same epoch.
    const auto epoch_of = [&](std::uint64_t step) { return epochs[kSchedule.rows_before(step)]; };
    const ShapeScheduleReport report = shape_schedule_report(curriculum_config(data, drop_last, 2, 1), 10, "steps");
    REQUIRE(report.stages.size() == 3);
    const std::uint64_t firsts[] = {0, 3, 7};
    for (std::size_t i = 0; i < 3; ++i) {
      CAPTURE(i);
      const ShapeStageFigures& s = report.stages[i];
      CHECK(s.first_step == firsts[i]);
      CHECK(s.block_size == kSchedule.stages()[i].block_size);
      CHECK(s.rows == kSchedule.stages()[i].global_batch / 2);
      CHECK(s.rows_before == kSchedule.rows_before(firsts[i]));
      std::uint64_t batch_in_epoch = 0;
      for (std::uint64_t step = 0; step < firsts[i]; ++step) batch_in_epoch += epoch_of(step) == epoch_of(firsts[i]);
      REQUIRE(s.reached);
      CHECK(s.reached->epoch == epoch_of(firsts[i]));
      CHECK(s.reached->batch_in_epoch == batch_in_epoch);
    }
  }
}

TEST_CASE("packed curriculum: the split's info follows the rows") {
  const Dataset data;
  // batches_per_epoch: the steps whose first row is in the epoch, from the reference.
  const std::vector<RefRow> rows = reference_rows(data, false, kSchedule.rows_before(40));
  Loader loader(curriculum_config(data, false, 1, 0));
  std::map<std::uint64_t, std::uint64_t> batches;
  std::map<std::uint64_t, std::uint64_t> reported;
  for (std::uint64_t step = 0; step < 30; ++step) {
    const SplitInfo info = loader.split_info("train");
    reported.emplace(info.next_epoch, info.batches_per_epoch);
    const Batch b = loader.get_batch();
    ++batches[b.epoch()];
  }
  for (const auto& [epoch_key, count] : batches) {
    const std::uint64_t epoch = epoch_key;
    if (epoch + 1 == batches.size()) break;  // the last epoch is not complete
    CAPTURE(epoch);
    CHECK(reported.at(epoch) == count);
  }
  CHECK(batches.size() > 2);
}
