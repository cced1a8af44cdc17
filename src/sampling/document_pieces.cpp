#include "sampling/document_pieces.hpp"

#include <algorithm>

namespace tokenfeed {

DocumentPieces::Piece DocumentPieces::piece(std::uint64_t u) const noexcept {
  // The last document whose first piece (or token) is at most u.
  const std::vector<std::uint64_t>& firsts = first_token_.empty() ? first_piece_ : first_token_;
  const auto after = std::upper_bound(firsts.begin(), firsts.end(), u);
  const auto k = static_cast<std::uint64_t>(after - firsts.begin() - 1);
  Piece p;
  p.episode = kept_[k];
  if (!first_token_.empty()) {
    p.first = u - first_token_[static_cast<std::size_t>(k)];
    return p;
  }
  p.index = u - first_piece_[static_cast<std::size_t>(k)];
  p.first = p.index * (S_ - 1);
  return p;
}

std::uint64_t DocumentPieces::index_of(std::uint64_t id) const noexcept {
  // kept_ is ascending: the document's place in it by bisection.
  std::uint64_t lo = 0, hi = kept_.size();
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (kept_[mid] < id) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

std::uint64_t DocumentPieces::rows_at(std::uint64_t T) const noexcept {
  std::uint64_t rows = 0;
  for (std::size_t k = 0; k + 1 < first_token_.size(); ++k)
    rows += pieces_of(first_token_[k + 1] - first_token_[k], T + 1);
  return rows;
}

DocumentPieces::PieceTable DocumentPieces::table_at(std::uint64_t T) const {
  PieceTable table;
  table.block_size = T;
  table.first.reserve(first_piece_.size());
  table.first.push_back(0);
  for (std::size_t k = 0; k + 1 < first_token_.size(); ++k)
    table.first.push_back(table.first.back() + pieces_of(first_token_[k + 1] - first_token_[k], T + 1));
  return table;
}

std::uint64_t DocumentPieces::row_of(const PieceTable& table, std::uint64_t u) const noexcept {
  // The last document whose first piece is at most u (documents of no piece are passed).
  const auto after = std::upper_bound(table.first.begin(), table.first.end(), u);
  const auto k = static_cast<std::size_t>(after - table.first.begin() - 1);
  return first_token_[k] + (u - table.first[k]) * table.block_size;
}

IdList DocumentPieces::expand(const IdList& documents) const {
  IdList pieces = IdList::for_ids_below(size(), static_cast<std::size_t>(size()));
  for (const std::uint64_t id : documents) {
    const std::uint64_t k = index_of(id);
    for (std::uint64_t u = first_piece(k); u < first_piece(k + 1); ++u) pieces.push_back(u);
  }
  return pieces;
}

}  // namespace tokenfeed
