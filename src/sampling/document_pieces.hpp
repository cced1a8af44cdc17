// DocumentPieces: the pieces truncation=split cuts kept episodes (documents) into, and the
// numbering of those pieces that the split modes sample instead of episode ids.
//
// With S = block_size + 1, a document t of n >= 2 tokens has pieces_of(n, S) =
// ceil((n - 1) / (S - 1)) pieces; piece j is t[j*(S-1) : min(n, j*(S-1) + S)]. Each piece
// starts with the previous one's last token, so each label position 1..n-1 is a target in
// exactly one piece; a last piece of one token (no label) is not made. A document of at
// most S tokens is one piece: itself.
//
// Pieces are numbered document after document in the order of `kept` (ascending ids), a
// document's pieces consecutively: piece number u of kept document k is in
// [first_piece(k), first_piece(k + 1)). When no document is longer than S, piece number k
// is kept document k.
//
// Pure arithmetic over lengths: no files. Thread-safety: immutable after construction;
// const members may be called concurrently.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "util/id_list.hpp"

namespace tokenfeed {

class DocumentPieces {
 public:
  // `length_of(id)` is the token count (>= 2) of each kept id. REQUIRES: kept ascending;
  // S >= 2.
  template <typename LengthOf>
  DocumentPieces(IdList kept, std::uint64_t S, LengthOf&& length_of) : kept_(std::move(kept)), S_(S) {
    first_piece_.reserve(static_cast<std::size_t>(kept_.size()) + 1);
    first_piece_.push_back(0);
    for (const std::uint64_t id : kept_) first_piece_.push_back(first_piece_.back() + pieces_of(length_of(id), S_));
  }

  // The pieces of a document of n tokens: ceil((n - 1) / (S - 1)), 0 for n < 2.
  static std::uint64_t pieces_of(std::uint64_t n, std::uint64_t S) noexcept {
    return n < 2 ? 0 : (n - 2) / (S - 1) + 1;
  }

  // Pieces of all kept documents together.
  std::uint64_t size() const noexcept { return first_piece_.back(); }
  const IdList& kept() const noexcept { return kept_; }
  std::uint64_t S() const noexcept { return S_; }
  // The first piece number of kept document k (k <= kept().size()).
  std::uint64_t first_piece(std::uint64_t k) const noexcept { return first_piece_[static_cast<std::size_t>(k)]; }
  // The pieces of kept document k (k < kept().size()).
  std::uint64_t pieces_in(std::uint64_t k) const noexcept { return first_piece(k + 1) - first_piece(k); }

  struct Piece {
    std::uint64_t episode = 0;  // the document's global id
    std::uint64_t index = 0;    // j: the piece's place in its document
    std::uint64_t first = 0;    // its first token: j * (S - 1)
  };
  // Piece number `u`. REQUIRES: u < size().
  Piece piece(std::uint64_t u) const noexcept;

  // The pieces of `documents` (ids of kept, each once, in any order): each document's
  // pieces in place of it, in order. The order of the split modes' epochs.
  IdList expand(const IdList& documents) const;

 private:
  IdList kept_;
  std::uint64_t S_;
  std::vector<std::uint64_t> first_piece_;  // kept().size() + 1 offsets
};

}  // namespace tokenfeed
