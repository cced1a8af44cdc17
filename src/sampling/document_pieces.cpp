#include "sampling/document_pieces.hpp"

#include <algorithm>

namespace tokenfeed {

DocumentPieces::Piece DocumentPieces::piece(std::uint64_t u) const noexcept {
  // The last document whose first piece is at most u.
  const auto after = std::upper_bound(first_piece_.begin(), first_piece_.end(), u);
  const auto k = static_cast<std::uint64_t>(after - first_piece_.begin() - 1);
  Piece p;
  p.episode = kept_[k];
  p.index = u - first_piece_[static_cast<std::size_t>(k)];
  p.first = p.index * (S_ - 1);
  return p;
}

IdList DocumentPieces::expand(const IdList& documents) const {
  IdList pieces = IdList::for_ids_below(size(), static_cast<std::size_t>(size()));
  const std::uint64_t n = kept_.size();
  for (const std::uint64_t id : documents) {
    // kept_ is ascending: the document's place in it by bisection.
    std::uint64_t lo = 0, hi = n;
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (kept_[mid] < id) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    for (std::uint64_t u = first_piece(lo); u < first_piece(lo + 1); ++u) pieces.push_back(u);
  }
  return pieces;
}

}  // namespace tokenfeed
