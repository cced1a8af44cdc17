#include "sampling/rank_balance.hpp"

#include <algorithm>
#include <numeric>
#include <queue>
#include <utility>

namespace tokenfeed {

std::vector<std::uint32_t> balance_rows(const std::vector<std::uint64_t>& costs, std::size_t ranks,
                                        std::size_t rows_per_rank) {
  std::vector<std::uint32_t> order(costs.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&costs](std::uint32_t a, std::uint32_t b) { return costs[a] > costs[b]; });
  // The ranks that still lack rows, least cost first, then the lower rank.
  using Load = std::pair<std::uint64_t, std::size_t>;  // (cost so far, rank)
  std::priority_queue<Load, std::vector<Load>, std::greater<>> open;
  for (std::size_t r = 0; r < ranks; ++r) open.emplace(0, r);
  std::vector<std::vector<std::uint32_t>> taken(ranks);
  for (const std::uint32_t row : order) {
    const auto [cost, rank] = open.top();
    open.pop();
    taken[rank].push_back(row);
    if (taken[rank].size() < rows_per_rank) open.emplace(cost + costs[row], rank);
  }
  std::vector<std::uint32_t> out;
  out.reserve(costs.size());
  for (std::vector<std::uint32_t>& rows : taken) {
    std::sort(rows.begin(), rows.end());
    out.insert(out.end(), rows.begin(), rows.end());
  }
  std::vector<std::uint32_t> sliced(costs.size());
  std::iota(sliced.begin(), sliced.end(), 0u);
  if (rank_costs(costs, sliced, ranks, rows_per_rank).max <= rank_costs(costs, out, ranks, rows_per_rank).max) {
    return sliced;
  }
  return out;
}

RankCosts rank_costs(const std::vector<std::uint64_t>& costs, const std::vector<std::uint32_t>& assignment,
                     std::size_t ranks, std::size_t rows_per_rank) {
  RankCosts out;
  std::uint64_t total = 0;
  for (std::size_t r = 0; r < ranks; ++r) {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < rows_per_rank; ++i) sum += costs[assignment[r * rows_per_rank + i]];
    out.max = std::max(out.max, sum);
    total += sum;
  }
  out.mean = ranks > 0 ? static_cast<double>(total) / static_cast<double>(ranks) : 0.0;
  return out;
}

}  // namespace tokenfeed
