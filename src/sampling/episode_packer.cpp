#include "sampling/episode_packer.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>

namespace tokenfeed {

PackedEpoch pack_episodes(const IdList& order, const std::vector<std::uint32_t>& positions_of, std::uint32_t capacity,
                          std::size_t lookahead, const std::vector<bool>& follows,
                          const std::vector<std::uint32_t>* occupied_of) {
  return pack_episodes(order, {PackStage{0, capacity, &positions_of, occupied_of}}, lookahead, follows);
}

namespace {

// Above any capacity (block sizes are below 2^26: config) and a positive int32, which the
// search compares as such: the length of a piece that waits for its predecessor.
constexpr std::uint32_t kWaits = std::numeric_limits<std::int32_t>::max();

// The lookahead window: after every refill, the min(lookahead, unplaced) oldest unplaced
// units, in the order `Feed` gives them (units enter in that order, leave only when placed,
// and the erases keep the order). The bounds in the header rest on this invariant.
//
// Beside each unit it keeps what the unit occupies at the current stage, or kWaits for a
// piece whose predecessor is still in the window (right before it: older and adjacent in
// the order), so that the search for the longest fitting one reads one contiguous array of
// lengths instead of looking each unit's length up (most of the packer's time).
//
// `Feed` gives the units: Entry (a unit), bool next(Entry&) (the next unit in order, false
// when none is left), std::uint32_t occupies(const Entry&), and bool waits(const Entry&
// before, const Entry& unit) (unit is a piece whose predecessor is `before`).
template <typename Feed>
class Window {
 public:
  using Entry = typename Feed::Entry;
  // The lengths are searched in blocks of this many, the last one completed with kWaits.
  static constexpr std::size_t kBlock = 8;

  Window(Feed& feed, std::size_t lookahead)
      : feed_(feed), lookahead_(lookahead), lengths_((lookahead + kBlock - 1) / kBlock * kBlock, kWaits) {
    entries_.reserve(lookahead);
  }

  bool empty() const noexcept { return entries_.empty(); }
  std::size_t size() const noexcept { return entries_.size(); }
  const Entry& entry(std::size_t i) const noexcept { return entries_[i]; }
  std::uint32_t length(std::size_t i) const noexcept { return lengths_[i]; }

  // Every unit's length again (the feed's lengths changed: another stage).
  void refresh() {
    for (std::size_t i = 0; i < entries_.size(); ++i) lengths_[i] = length_at(i);
  }

  // Empties the window, its units returned in order (the feed cuts them anew).
  std::vector<Entry> take_all() {
    std::vector<Entry> taken = std::move(entries_);
    entries_.clear();
    entries_.reserve(lookahead_);
    std::fill(lengths_.begin(), lengths_.end(), kWaits);
    return taken;
  }

  void refill() {
    Entry unit;
    while (entries_.size() < lookahead_ && feed_.next(unit)) {
      entries_.push_back(unit);
      lengths_[entries_.size() - 1] = length_at(entries_.size() - 1);
    }
  }

  // The longest unit that fits `free` positions (a waiting piece never does), the earliest
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
    const std::size_t n = entries_.size();
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

  // Removes entry i and refills. The entry that moves into place i lost its left
  // neighbour: when that was its predecessor, it no longer waits.
  void erase(std::size_t i) {
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
    const auto from = lengths_.begin() + static_cast<std::ptrdiff_t>(i);
    std::copy(from + 1, lengths_.begin() + static_cast<std::ptrdiff_t>(entries_.size() + 1), from);
    lengths_[entries_.size()] = kWaits;
    if (i < entries_.size()) lengths_[i] = length_at(i);
    refill();
  }

 private:
  std::uint32_t length_at(std::size_t i) const noexcept {
    if (i > 0 && feed_.waits(entries_[i - 1], entries_[i])) return kWaits;
    return feed_.occupies(entries_[i]);
  }

  Feed& feed_;
  const std::size_t lookahead_;
  std::vector<Entry> entries_;
  std::vector<std::uint32_t> lengths_;  // per entry: what it occupies, or kWaits; kWaits past them
};

// The units of pack_episodes: the ids of `order`, with the lengths of the current stage.
class EpisodeFeed {
 public:
  using Entry = std::uint64_t;

  EpisodeFeed(const IdList& order, const std::vector<bool>& follows) : order_(order), follows_(follows) {}

  void set_lengths(const std::vector<std::uint32_t>& occupies) { occupies_ = &occupies; }

  bool next(Entry& id) {
    if (next_ == order_.size()) return false;
    id = order_[next_++];
    return true;
  }
  std::uint32_t occupies(Entry id) const noexcept { return (*occupies_)[id]; }
  bool waits(Entry before, Entry id) const noexcept { return !follows_.empty() && follows_[id] && before == id - 1; }

 private:
  const IdList& order_;
  const std::vector<bool>& follows_;
  const std::vector<std::uint32_t>* occupies_ = nullptr;
  std::uint64_t next_ = 0;  // the next position of `order` to enter
};

// The units of pack_pieces: the pieces of the documents of `order`, cut at the current
// capacity as they enter (and anew at each change of it, recut()).
class PieceFeed {
 public:
  struct Entry {
    std::uint64_t k = 0;      // the document's place in pieces.kept()
    std::uint64_t first = 0;  // the piece's first token in its document
  };

  PieceFeed(const IdList& order, const DocumentPieces& pieces, std::uint32_t multiple)
      : order_(order), pieces_(pieces), multiple_(multiple) {}

  bool next(Entry& piece) {
    if (!pending_.empty()) {
      piece = pending_.front();
      pending_.pop_front();
      return true;
    }
    if (!cutting_) {
      if (next_ == order_.size()) return false;
      cut_ = Entry{pieces_.index_of(order_[next_++]), 0};
      cutting_ = true;
    }
    piece = cut_;
    cut_.first += capacity_;
    cutting_ = cut_.first + 1 < pieces_.tokens_in(cut_.k);  // a last piece needs a label
    return true;
  }
  // A piece's positions at the current capacity (its tokens - 1), and what it occupies.
  std::uint32_t positions(const Entry& piece) const noexcept {
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(capacity_, pieces_.tokens_in(piece.k) - 1 - piece.first));
  }
  std::uint32_t occupies(const Entry& piece) const noexcept {
    return (positions(piece) + multiple_ - 1) / multiple_ * multiple_;
  }
  bool waits(const Entry& before, const Entry& piece) const noexcept { return before.k == piece.k; }
  std::uint64_t id(const Entry& piece) const noexcept { return pieces_.first_token(piece.k) + piece.first; }

  // Cuts every unplaced piece anew at `capacity`: `unplaced` (the window's units, in order),
  // the pending ones after them and the document being cut. A document's unplaced pieces
  // are consecutive in that order and the last of its pieces (they are placed in order), so
  // each such document is cut again from its oldest unplaced piece's first token.
  void recut(std::uint32_t capacity, std::vector<Entry> unplaced) {
    const bool first_cut = capacity_ == 0;
    capacity_ = capacity;
    if (first_cut) return;
    unplaced.insert(unplaced.end(), pending_.begin(), pending_.end());
    pending_.clear();
    std::vector<Entry> documents;  // each document's oldest unplaced piece, in order
    for (const Entry& piece : unplaced) {
      if (documents.empty() || documents.back().k != piece.k) documents.push_back(piece);
    }
    // The document being cut goes on from its oldest unplaced piece (or, when all of its
    // pieces so far are placed, from the token reached).
    if (cutting_ && !documents.empty() && documents.back().k == cut_.k) {
      cut_ = documents.back();
      documents.pop_back();
    }
    for (const Entry& from : documents) {
      const std::uint64_t n = pieces_.tokens_in(from.k);
      for (Entry piece = from; piece.first + 1 < n; piece.first += capacity_) pending_.push_back(piece);
    }
  }

 private:
  const IdList& order_;
  const DocumentPieces& pieces_;
  const std::uint32_t multiple_;
  std::uint32_t capacity_ = 0;  // 0: before the first stage
  std::uint64_t next_ = 0;      // the next document of `order` to enter
  std::deque<Entry> pending_;   // pieces cut anew, to enter before the document being cut
  bool cutting_ = false;        // cut_ is the next piece of a document already entered
  Entry cut_;
};

// The packer over any feed: rows from row 0, the stage of each row found at its start, where
// `enter(stage)` sets the feed's lengths for that stage's capacity (and refreshes or refills
// the window), `positions(unit)` is a unit's positions at it and `id(unit)` what
// PackedEpoch lists; with kKeepUnitPositions, PackedEpoch::unit_positions as well.
template <bool kKeepUnitPositions, typename Feed, typename Stage, typename Enter, typename Positions, typename Id>
PackedEpoch pack_rows(Window<Feed>& window, const std::vector<Stage>& stages, std::size_t units, Enter&& enter,
                      Positions&& positions, Id&& id) {
  PackedEpoch packed;
  packed.episodes.reserve(units);
  packed.row_begin.push_back(0);
  std::size_t stage = 0;
  enter(stages[0]);
  while (!window.empty()) {
    // The stage of this row: its capacity and the units' lengths at it.
    const std::size_t was = stage;
    while (stage + 1 < stages.size() && stages[stage + 1].first_row <= packed.rows()) ++stage;
    if (stage != was) enter(stages[stage]);
    // The oldest unplaced unit opens the row (it never waits: its predecessor is older).
    std::uint32_t free = stages[stage].capacity - window.length(0);
    packed.positions += positions(window.entry(0));
    if constexpr (kKeepUnitPositions) packed.unit_positions.push_back(positions(window.entry(0)));
    packed.episodes.push_back(id(window.entry(0)));
    window.erase(0);
    while (free > 0) {
      const std::size_t best = window.longest_fitting(free);
      if (best == window.size()) break;
      free -= window.length(best);
      packed.positions += positions(window.entry(best));
      if constexpr (kKeepUnitPositions) packed.unit_positions.push_back(positions(window.entry(best)));
      packed.episodes.push_back(id(window.entry(best)));
      window.erase(best);
    }
    packed.row_begin.push_back(packed.episodes.size());
  }
  return packed;
}

}  // namespace

PackedEpoch pack_episodes(const IdList& order, const std::vector<PackStage>& stages, std::size_t lookahead,
                          const std::vector<bool>& follows) {
  EpisodeFeed feed(order, follows);
  Window<EpisodeFeed> window(feed, lookahead);
  const std::vector<std::uint32_t>* positions_of = nullptr;
  const auto enter = [&](const PackStage& s) {
    feed.set_lengths(s.occupied_of != nullptr ? *s.occupied_of : *s.positions_of);
    positions_of = s.positions_of;
    window.refresh();
    window.refill();
  };
  return pack_rows<false>(
      window, stages, static_cast<std::size_t>(order.size()), enter,
      [&positions_of](std::uint64_t id) { return (*positions_of)[id]; }, [](std::uint64_t id) { return id; });
}

PackedEpoch pack_pieces(const IdList& documents, const DocumentPieces& pieces, const std::vector<PieceStage>& stages,
                        std::size_t lookahead, std::uint32_t multiple) {
  PieceFeed feed(documents, pieces, multiple);
  Window<PieceFeed> window(feed, lookahead);
  std::uint32_t capacity = 0;
  const auto enter = [&](const PieceStage& s) {
    if (s.capacity == capacity) return;
    capacity = s.capacity;
    feed.recut(capacity, window.take_all());
    window.refill();
  };
  using Entry = PieceFeed::Entry;
  return pack_rows<true>(
      window, stages, static_cast<std::size_t>(documents.size()), enter,
      [&feed](const Entry& piece) { return feed.positions(piece); },
      [&feed](const Entry& piece) { return feed.id(piece); });
}

std::vector<std::uint32_t> occupied_padded(const std::vector<std::uint32_t>& positions_of, std::uint32_t multiple) {
  std::vector<std::uint32_t> out(positions_of.size());
  for (std::size_t id = 0; id < out.size(); ++id) out[id] = (positions_of[id] + multiple - 1) / multiple * multiple;
  return out;
}

}  // namespace tokenfeed
