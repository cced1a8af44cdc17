#include "sampling/episode_packer.hpp"

#include <algorithm>

namespace tokenfeed {

PackedEpoch pack_episodes(const IdList& order, const std::vector<std::uint32_t>& positions_of, std::uint32_t capacity,
                          std::size_t lookahead, const std::vector<bool>& follows, std::uint32_t multiple) {
  // What an episode occupies: its positions, padded to the multiple.
  const auto occupied = [&positions_of, multiple](std::uint64_t id) {
    const std::uint32_t p = positions_of[id];
    return multiple == 1 ? p : (p + multiple - 1) / multiple * multiple;
  };
  PackedEpoch packed;
  packed.episodes.reserve(static_cast<std::size_t>(order.size()));
  packed.row_begin.push_back(0);
  // The window: after every refill, the min(lookahead, unplaced) oldest unplaced episodes,
  // in epoch order (episodes enter from `order` in order, leave only when placed, and the
  // erases keep the order). The bounds in the header rest on this invariant.
  std::vector<std::uint64_t> pending;
  pending.reserve(lookahead);
  std::uint64_t next = 0;
  const auto refill = [&] {
    while (pending.size() < lookahead && next < order.size()) pending.push_back(order[next++]);
  };
  refill();
  while (!pending.empty()) {
    // The oldest unplaced episode opens the row.
    std::uint32_t free = capacity - occupied(pending.front());
    packed.positions += positions_of[pending.front()];
    packed.episodes.push_back(pending.front());
    pending.erase(pending.begin());
    refill();
    while (free > 0) {
      std::size_t best = pending.size();
      for (std::size_t i = 0; i < pending.size(); ++i) {
        // A piece whose predecessor is unplaced waits for it; the predecessor, older and
        // adjacent in `order`, is then right before it in the window.
        if (!follows.empty() && i > 0 && follows[pending[i]] && pending[i - 1] == pending[i] - 1) continue;
        const std::uint32_t p = occupied(pending[i]);
        if (p <= free && (best == pending.size() || p > occupied(pending[best]))) best = i;
      }
      if (best == pending.size()) break;
      free -= occupied(pending[best]);
      packed.positions += positions_of[pending[best]];
      packed.episodes.push_back(pending[best]);
      pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(best));
      refill();
    }
    packed.row_begin.push_back(packed.episodes.size());
  }
  return packed;
}

}  // namespace tokenfeed
