#include "sampling/episode_packer.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace tokenfeed {

PackedEpoch pack_episodes(const IdList& order, const std::vector<std::uint32_t>& positions_of, std::uint32_t capacity,
                          std::size_t lookahead, const std::vector<bool>& follows,
                          const std::vector<std::uint32_t>* occupied_of) {
  return pack_episodes(order, {PackStage{0, capacity, &positions_of, occupied_of}}, lookahead, follows);
}

namespace {

// The lookahead window: after every refill, the min(lookahead, unplaced) oldest unplaced
// episodes, in epoch order (episodes enter from `order` in order, leave only when placed,
// and the erases keep the order). The bounds in the header rest on this invariant.
//
// Beside each id it keeps what the id occupies at the current stage, or kWaits for a piece
// whose predecessor is still in the window (right before it: older and adjacent in
// `order`), so that the search for the longest fitting one reads one contiguous array of
// lengths instead of looking each id's length up (most of the packer's time).
class Window {
 public:
  // Above any capacity (block sizes are below 2^26: config) and a positive int32, which
  // the search compares as such.
  static constexpr std::uint32_t kWaits = std::numeric_limits<std::int32_t>::max();
  // The lengths are searched in blocks of this many, the last one completed with kWaits.
  static constexpr std::size_t kBlock = 8;

  Window(const IdList& order, std::size_t lookahead, const std::vector<bool>& follows)
      : order_(order),
        lookahead_(lookahead),
        follows_(follows),
        lengths_((lookahead + kBlock - 1) / kBlock * kBlock, kWaits) {
    ids_.reserve(lookahead);
  }

  bool empty() const noexcept { return ids_.empty(); }
  std::size_t size() const noexcept { return ids_.size(); }
  std::uint64_t id(std::size_t i) const noexcept { return ids_[i]; }

  // The lengths of another stage: every id's length again.
  void set_lengths(const std::vector<std::uint32_t>& occupies) {
    occupies_ = &occupies;
    for (std::size_t i = 0; i < ids_.size(); ++i) lengths_[i] = length_at(i);
  }

  void refill() {
    while (ids_.size() < lookahead_ && next_ < order_.size()) {
      ids_.push_back(order_[next_++]);
      lengths_[ids_.size() - 1] = length_at(ids_.size() - 1);
    }
  }

  // The longest id that fits `free` positions (a waiting piece never does), the earliest
  // on ties; size() when none fits. REQUIRES: free < kWaits.
  std::size_t longest_fitting(std::uint32_t free) const noexcept {
    // Two passes without a data-dependent branch in the first (whether a length fits is
    // as good as random): the longest length that fits, then its first place. The first
    // keeps a maximum per lane, in the compilers' vector extension: two vectors of four
    // int32 per block (SSE2, x86-64's baseline, at any -O; the lengths are below 2^31),
    // each keeping its own maximum.
    using Lanes = std::int32_t __attribute__((vector_size(16)));
    constexpr std::size_t kLanes = sizeof(Lanes) / sizeof(std::int32_t);
    static_assert(kBlock == 2 * kLanes);
    const std::uint32_t* lengths = lengths_.data();
    const std::size_t n = ids_.size();
    const Lanes gap = Lanes{} + static_cast<std::int32_t>(free);
    const auto keep_longest = [&gap](Lanes& longest, const std::uint32_t* from) {
      Lanes p;
      std::memcpy(&p, from, sizeof p);
      const Lanes fits = p & (p <= gap);
      const Lanes longer = fits > longest;
      longest = (fits & longer) | (longest & ~longer);
    };
    Lanes low = {}, high = {};  // every length is >= 1: 0 is none
    for (std::size_t b = 0; b < n; b += kBlock) {
      keep_longest(low, lengths + b);
      keep_longest(high, lengths + b + kLanes);
    }
    std::int32_t longest_lane = 0;
    for (std::size_t j = 0; j < kLanes; ++j) longest_lane = std::max({longest_lane, low[j], high[j]});
    const auto longest = static_cast<std::uint32_t>(longest_lane);
    if (longest == 0) return n;
    std::size_t i = 0;
    while (lengths[i] != longest) ++i;
    return i;
  }

  std::uint32_t length(std::size_t i) const noexcept { return lengths_[i]; }

  // Removes entry i and refills. The entry that moves into place i lost its left
  // neighbour: when that was its predecessor, it no longer waits.
  void erase(std::size_t i) {
    ids_.erase(ids_.begin() + static_cast<std::ptrdiff_t>(i));
    const auto from = lengths_.begin() + static_cast<std::ptrdiff_t>(i);
    std::copy(from + 1, lengths_.begin() + static_cast<std::ptrdiff_t>(ids_.size() + 1), from);
    lengths_[ids_.size()] = kWaits;
    if (i < ids_.size()) lengths_[i] = length_at(i);
    refill();
  }

 private:
  std::uint32_t length_at(std::size_t i) const noexcept {
    const std::uint64_t u = ids_[i];
    if (!follows_.empty() && i > 0 && follows_[u] && ids_[i - 1] == u - 1) return kWaits;
    return (*occupies_)[u];
  }

  const IdList& order_;
  const std::size_t lookahead_;
  const std::vector<bool>& follows_;
  const std::vector<std::uint32_t>* occupies_ = nullptr;
  std::uint64_t next_ = 0;  // the next position of `order` to enter
  std::vector<std::uint64_t> ids_;
  std::vector<std::uint32_t> lengths_;  // per id: what it occupies, or kWaits; kWaits past them
};

}  // namespace

PackedEpoch pack_episodes(const IdList& order, const std::vector<PackStage>& stages, std::size_t lookahead,
                          const std::vector<bool>& follows) {
  PackedEpoch packed;
  packed.episodes.reserve(static_cast<std::size_t>(order.size()));
  packed.row_begin.push_back(0);
  Window window(order, lookahead, follows);
  const auto occupies_of = [](const PackStage& s) -> const std::vector<std::uint32_t>& {
    return s.occupied_of != nullptr ? *s.occupied_of : *s.positions_of;
  };
  std::size_t stage = 0;
  window.set_lengths(occupies_of(stages[0]));
  window.refill();
  while (!window.empty()) {
    // The stage of this row: its capacity and the episodes' lengths at it.
    const std::size_t was = stage;
    while (stage + 1 < stages.size() && stages[stage + 1].first_row <= packed.rows()) ++stage;
    if (stage != was) window.set_lengths(occupies_of(stages[stage]));
    const std::uint32_t capacity = stages[stage].capacity;
    const std::vector<std::uint32_t>& positions_of = *stages[stage].positions_of;
    // The oldest unplaced episode opens the row (it never waits: its predecessor is older).
    std::uint32_t free = capacity - window.length(0);
    packed.positions += positions_of[window.id(0)];
    packed.episodes.push_back(window.id(0));
    window.erase(0);
    while (free > 0) {
      const std::size_t best = window.longest_fitting(free);
      if (best == window.size()) break;
      free -= window.length(best);
      packed.positions += positions_of[window.id(best)];
      packed.episodes.push_back(window.id(best));
      window.erase(best);
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
