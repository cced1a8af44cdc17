// nearest_rank: the q-quantile of sorted values by the nearest rank, the element at index
// round(q * (n - 1)). `tokenfeed bench`, src/inspect/ (`tokenfeed inspect`, tokenfeed.inspect())
// and the Python module's stats() all report percentiles this way, so that their figures agree.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tokenfeed {

// REQUIRES: `sorted` is in ascending order; 0 <= q <= 1. Returns T{} when it is empty.
template <typename T>
T nearest_rank(const std::vector<T>& sorted, double q) {
  if (sorted.empty()) return T{};
  const auto i = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace tokenfeed
