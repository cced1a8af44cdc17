#include "sampling/episode_packer.hpp"

#include <algorithm>

namespace tokenfeed {

PackedEpoch pack_episodes(const IdList& order, const std::vector<std::uint32_t>& positions_of, std::uint32_t capacity,
                          std::size_t lookahead, const std::vector<bool>& follows,
                          const std::vector<std::uint32_t>* occupied_of) {
  return pack_episodes(order, {PackStage{0, capacity, &positions_of, occupied_of}}, lookahead, follows);
}

PackedEpoch pack_episodes(const IdList& order, const std::vector<PackStage>& stages, std::size_t lookahead,
                          const std::vector<bool>& follows) {
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
  std::size_t stage = 0;
  while (!pending.empty()) {
    // The stage of this row: its capacity and the episodes' lengths at it.
    while (stage + 1 < stages.size() && stages[stage + 1].first_row <= packed.rows()) ++stage;
    const std::uint32_t capacity = stages[stage].capacity;
    const std::vector<std::uint32_t>& positions_of = *stages[stage].positions_of;
    const std::vector<std::uint32_t>& occupies =
        stages[stage].occupied_of != nullptr ? *stages[stage].occupied_of : positions_of;
    const auto occupied = [&occupies](std::uint64_t id) { return occupies[id]; };
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

std::vector<std::uint32_t> occupied_padded(const std::vector<std::uint32_t>& positions_of, std::uint32_t multiple) {
  std::vector<std::uint32_t> out(positions_of.size());
  for (std::size_t id = 0; id < out.size(); ++id) out[id] = (positions_of[id] + multiple - 1) / multiple * multiple;
  return out;
}

}  // namespace tokenfeed
