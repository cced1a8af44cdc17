// balance_ranks=attention (sft_packed): each global batch's rows handed to the data-parallel
// ranks so that their attention costs (Σ len² of each row's sequences) are even, the global
// batch itself unchanged; checked against a greedy written here, and through the loader:
// the same rows, exact resume, the audit log's record of the assignment.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "sampling/rank_balance.hpp"
#include "test_support.hpp"
#include "tokenfeed/audit.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// The reference: rows by cost, largest first (the earlier on ties), each to the open rank
// with the least cost so far (the lower on ties), scanning every rank; the plain slicing
// instead when its slowest rank is no slower.
std::vector<std::vector<std::uint32_t>> reference_balance(const std::vector<std::uint64_t>& costs, std::size_t ranks,
                                                          std::size_t per_rank) {
  std::vector<std::uint32_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return costs[a] > costs[b]; });
  std::vector<std::vector<std::uint32_t>> taken(ranks);
  std::vector<std::uint64_t> load(ranks, 0);
  for (const std::uint32_t row : order) {
    std::size_t best = ranks;
    for (std::size_t r = 0; r < ranks; ++r) {
      if (taken[r].size() < per_rank && (best == ranks || load[r] < load[best])) best = r;
    }
    taken[best].push_back(row);
    load[best] += costs[row];
  }
  for (auto& rows : taken) std::sort(rows.begin(), rows.end());
  // The slicing where it is no worse.
  std::uint64_t greedy = 0, sliced = 0;
  for (std::size_t r = 0; r < ranks; ++r) {
    std::uint64_t g = 0, s = 0;
    for (std::size_t i = 0; i < per_rank; ++i) {
      g += costs[taken[r][i]];
      s += costs[r * per_rank + i];
    }
    greedy = std::max(greedy, g);
    sliced = std::max(sliced, s);
  }
  if (sliced <= greedy) {
    for (std::size_t r = 0; r < ranks; ++r) {
      for (std::size_t i = 0; i < per_rank; ++i) taken[r][i] = static_cast<std::uint32_t>(r * per_rank + i);
    }
  }
  return taken;
}

Config balanced_config(const std::filesystem::path& dir, std::int64_t world, std::int64_t rank) {
  Config c = make_config(dir, 2, 48);
  c.dataset_mode = DatasetMode::sft_packed;
  c.use_loss_mask = true;
  c.token_dtype = TokenDtype::uint32;
  c.world_size = world;
  c.rank = rank;
  c.balance_ranks = RankBalance::attention;
  return c;
}

// Each row's attention cost from a batch's segments: Σ positions² of its episodes.
std::vector<std::uint64_t> row_costs(const Batch& b) {
  std::vector<std::uint64_t> costs(b.rows(), 0);
  for (const PackedSegment& s : b.segments()) costs[s.row] += std::uint64_t{s.positions} * s.positions;
  return costs;
}

}  // namespace

TEST_CASE("rank balance: the greedy of the reference, every rank its rows, each row once") {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t ranks = 1 + rng() % 9, per_rank = 1 + rng() % 6;
    std::vector<std::uint64_t> costs(ranks * per_rank);
    for (auto& c : costs) c = rng() % 4 == 0 ? 0 : rng() % (trial % 2 == 0 ? 5 : 100000);  // many ties when small
    const std::vector<std::uint32_t> got = balance_rows(costs, ranks, per_rank);
    const auto want = reference_balance(costs, ranks, per_rank);
    REQUIRE(got.size() == costs.size());
    for (std::size_t r = 0; r < ranks; ++r) {
      CAPTURE(trial);
      CAPTURE(r);
      CHECK(std::vector<std::uint32_t>(got.begin() + r * per_rank, got.begin() + (r + 1) * per_rank) == want[r]);
    }
    CHECK(std::set<std::uint32_t>(got.begin(), got.end()).size() == costs.size());
    // The balance never does worse than the plain slicing.
    std::vector<std::uint32_t> sliced(costs.size());
    std::iota(sliced.begin(), sliced.end(), 0u);
    CHECK(rank_costs(costs, got, ranks, per_rank).max <= rank_costs(costs, sliced, ranks, per_rank).max);
    CHECK(rank_costs(costs, got, ranks, per_rank).mean == rank_costs(costs, sliced, ranks, per_rank).mean);
  }
  // Two long rows that the slicing gives one rank: spread, each with a short one.
  CHECK(balance_rows({100, 90, 1, 1, 1, 1}, 3, 2) == std::vector<std::uint32_t>{0, 5, 1, 4, 2, 3});
  // One long row: the slicing is already as good as any, and is kept.
  CHECK(balance_rows({1, 1, 100, 1, 1, 1}, 3, 2) == std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("rank balance: the loader hands the same global batches to the ranks, balanced, and resumes exactly") {
  TempDir dir;
  write_split(dir.path(), "train", random_episodes(300, 48, 61), TokenDtype::uint32, true, 2);
  const std::int64_t world = 4;
  const std::size_t steps = 12;
  // Every rank's rows of each step, as (episode of the row's first segment, costs) per row.
  std::map<std::size_t, std::multiset<std::vector<std::int64_t>>> balanced_rows, sliced_rows;
  std::vector<std::uint64_t> balanced_max(steps, 0), sliced_max(steps, 0);
  for (const bool balance : {true, false}) {
    for (std::int64_t rank = 0; rank < world; ++rank) {
      Config c = balanced_config(dir.path(), world, rank);
      if (!balance) c.balance_ranks = RankBalance::none;
      Loader loader(c);
      for (std::size_t k = 0; k < steps; ++k) {
        Batch b = loader.get_batch();
        const std::vector<std::uint64_t> costs = row_costs(b);
        const std::uint64_t mine = std::accumulate(costs.begin(), costs.end(), std::uint64_t{0});
        (balance ? balanced_max : sliced_max)[k] = std::max((balance ? balanced_max : sliced_max)[k], mine);
        for (std::size_t r = 0; r < b.rows(); ++r) {
          std::vector<std::int64_t> row{b.episode_ids()[r]};
          for (const PackedSegment& s : b.segments()) {
            if (s.row == r) row.push_back(s.episode);
          }
          (balance ? balanced_rows : sliced_rows)[k].insert(row);
        }
      }
    }
  }
  std::size_t better = 0;
  for (std::size_t k = 0; k < steps; ++k) {
    CAPTURE(k);
    CHECK(balanced_rows[k] == sliced_rows[k]);  // the same rows, only their ranks differ
    CHECK(balanced_max[k] <= sliced_max[k]);
    better += balanced_max[k] < sliced_max[k];
  }
  CHECK(better > 0);
  // The audit log records each step's assignment and the ranks' costs, as computed here.
  TempDir logs;
  Config logged = balanced_config(dir.path(), world, 1);
  logged.audit_log_dir = logs.path();
  {
    Loader loader(logged);
    for (std::size_t k = 0; k < steps; ++k) loader.get_batch();
  }
  std::size_t events = 0;
  for (const auto& entry : std::filesystem::directory_iterator(logs.path())) {
    for (const AuditEvent& e : read_audit_log(entry.path()).events) {
      if (e.action != "rows_balanced") continue;
      const auto k = static_cast<std::size_t>(std::stoull(std::string(*e.field("step"))));
      CAPTURE(k);
      CHECK(std::stoull(std::string(*e.field("cost_max_balanced"))) == balanced_max[k]);
      CHECK(std::stoull(std::string(*e.field("cost_max_sliced"))) == sliced_max[k]);
      CHECK(e.field("rows")->front() == '[');
      ++events;
    }
  }
  CHECK(events == steps);
}

TEST_CASE("rank balance: a state resumes onto the same balanced batches, and other modes refuse the key") {
  TempDir dir;
  write_split(dir.path(), "train", random_episodes(200, 48, 67), TokenDtype::uint32, true, 1);
  const Config c = balanced_config(dir.path(), 3, 2);
  std::vector<std::vector<std::int64_t>> straight;
  std::string state;
  {
    Loader loader(c);
    for (int k = 0; k < 9; ++k) {
      Batch b = loader.get_batch();
      straight.emplace_back(b.tokens().begin(), b.tokens().end());
      if (k == 3) state = loader.save_state();
    }
  }
  Loader resumed(c);
  resumed.load_state(state);
  for (std::size_t k = 4; k < straight.size(); ++k) {
    Batch b = resumed.get_batch();
    CHECK(std::vector<std::int64_t>(b.tokens().begin(), b.tokens().end()) == straight[k]);
  }
  // The global stream is the balance's too: the state of a loader without it is taken.
  Config none = c;
  none.balance_ranks = RankBalance::none;
  CHECK_NOTHROW(Loader(none).load_state(state));

  Config episode = c;
  episode.dataset_mode = DatasetMode::sft_episode;
  CHECK(error_of([&] { Loader loader(episode); }).find("balance_ranks") != std::string::npos);
  Config mixture = c;
  mixture.dataset_dir.clear();
  mixture.mixture = {MixtureSource{"a", "1", {{"dataset_dir", dir.path().string()}}, std::nullopt}};
  CHECK(error_of([&] { Loader loader(mixture); }).find("balance_ranks") != std::string::npos);
}
