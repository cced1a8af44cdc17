// Balancing a global batch's rows across data-parallel ranks by attention cost
// (Config::balance_ranks = attention, sft_packed).
//
// A row's attention cost is the sum of its sequences' squared lengths (Σ len², what
// variable-length attention spends on it). The rows of one global batch are handed out so
// that every rank takes the same number of them, and the ranks' summed costs are as even
// as a greedy makes them: the rows in order of cost, largest first (ties: the earlier row),
// each to the rank with the least cost so far among those that still lack rows (ties: the
// lower rank): the longest-processing-time rule, bound to equal row counts. The greedy can
// lose to the plain slicing (rank r taking rows [r·B, (r+1)·B)) on a few batches; when the
// slicing's largest rank cost is no larger, the slicing is kept, so the balance never makes
// the slowest rank slower.
//
// A pure function of the costs: every rank computes the same assignment from the same
// global batch, with no communication, and a resumed run the same as the first.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tokenfeed {

// For `costs` of ranks * rows_per_rank rows: each rank's rows, rank after rank, each
// rank's in increasing row order (out[rank * rows_per_rank + i]): the greedy's, or the
// slicing's where that is no worse (above). REQUIRES: costs.size() == ranks *
// rows_per_rank, ranks >= 1.
std::vector<std::uint32_t> balance_rows(const std::vector<std::uint64_t>& costs, std::size_t ranks,
                                        std::size_t rows_per_rank);

// The largest and the mean of the ranks' summed costs under `assignment` (balance_rows'
// layout; the identity is rank r taking rows [r * rows_per_rank, (r + 1) * rows_per_rank)).
struct RankCosts {
  std::uint64_t max = 0;
  double mean = 0;
};
RankCosts rank_costs(const std::vector<std::uint64_t>& costs, const std::vector<std::uint32_t>& assignment,
                     std::size_t ranks, std::size_t rows_per_rank);

}  // namespace tokenfeed
