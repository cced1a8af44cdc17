// Packing whole episodes into rows: the deterministic packer of the sft_packed mode.
//
// Rows are filled from an epoch's episode order. A row starts with the oldest episode not
// yet placed; its gap is then filled from a lookahead window over the next `lookahead`
// unplaced episodes, taking the longest one that fits (the earliest on ties), until none
// fits. Every episode is placed exactly once, and an episode never waits for more than the
// lookahead, so the order stays close to the epoch order. The result is a pure function of
// (order, lengths, row capacity, lookahead).
#pragma once

#include <cstdint>
#include <vector>

namespace tokenfeed {

struct PackedEpoch {
  std::vector<std::uint64_t> episodes;   // global episode ids, row after row
  std::vector<std::uint64_t> row_begin;  // rows() + 1 offsets into `episodes`
  std::uint64_t positions = 0;           // input positions used by all rows together
  std::uint64_t rows() const noexcept { return row_begin.empty() ? 0 : row_begin.size() - 1; }
};

// `positions_of[id]` is the number of input positions episode `id` occupies (its kept
// length - 1), in [1, capacity]. REQUIRES: every id in `order` indexes positions_of.
PackedEpoch pack_episodes(const std::vector<std::uint64_t>& order, const std::vector<std::uint32_t>& positions_of,
                          std::uint32_t capacity, std::size_t lookahead);

}  // namespace tokenfeed
