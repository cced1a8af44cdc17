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
// Rows of changing length (Numbering::tokens, a sequence-length curriculum): a row of
// block size T holds T + 1 tokens of its document from the token reached, t[o : min(n,
// o + T + 1)], and the next row of that document starts at o + T (overlapping by one, as
// pieces do); a last row of one token is not made. The rows' ids are then token numbers:
// the row from token o of kept document k is first_token(k) + o, the kept documents'
// tokens numbered one after another in the order of `kept`. cut() lists an epoch's rows.
// A document whose rows all have block size S - 1 gives exactly its pieces at S.
//
// Random draws under a sequence-length curriculum (Numbering::tokens too): a stage of
// block size T draws among the pieces at T + 1 of all kept documents, numbered document
// after document as above (PieceTable, one per distinct length: kept().size() + 1 offsets,
// 8 bytes a document); piece j of kept document k is the row from token j*T, whose id is
// first_token(k) + j*T (row_of). At T = S - 1 that is piece number u's piece.
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
  // What the sampled ids number: the pieces at S, or (a sequence-length curriculum) the
  // first tokens of rows cut by cut().
  enum class Numbering : std::uint8_t { pieces, tokens };

  // `length_of(id)` is the token count (>= 2) of each kept id. REQUIRES: kept ascending;
  // S >= 2.
  template <typename LengthOf>
  DocumentPieces(IdList kept, std::uint64_t S, LengthOf&& length_of, Numbering numbering = Numbering::pieces)
      : kept_(std::move(kept)), S_(S) {
    first_piece_.reserve(static_cast<std::size_t>(kept_.size()) + 1);
    first_piece_.push_back(0);
    for (const std::uint64_t id : kept_) first_piece_.push_back(first_piece_.back() + pieces_of(length_of(id), S_));
    if (numbering == Numbering::tokens) {
      first_token_.reserve(static_cast<std::size_t>(kept_.size()) + 1);
      first_token_.push_back(0);
      for (const std::uint64_t id : kept_) first_token_.push_back(first_token_.back() + length_of(id));
    }
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

  Numbering numbering() const noexcept { return first_token_.empty() ? Numbering::pieces : Numbering::tokens; }
  // Numbering::tokens: the number of kept document k's first token, and its tokens.
  std::uint64_t first_token(std::uint64_t k) const noexcept { return first_token_[static_cast<std::size_t>(k)]; }
  std::uint64_t tokens_in(std::uint64_t k) const noexcept { return first_token(k + 1) - first_token(k); }
  // The place of kept id `id` in kept(). REQUIRES: id is kept.
  std::uint64_t index_of(std::uint64_t id) const noexcept;

  struct Piece {
    std::uint64_t episode = 0;  // the document's global id
    std::uint64_t index = 0;    // j: the piece's place in its document (Numbering::pieces only)
    std::uint64_t first = 0;    // its first token: j * (S - 1), or the row's token reached
  };
  // Piece number `u`, or (Numbering::tokens) the row whose first token is number `u`.
  // REQUIRES: u < size(), or u a row's id.
  Piece piece(std::uint64_t u) const noexcept;

  // The pieces of `documents` (ids of kept, each once, in any order): each document's
  // pieces in place of it, in order. The order of the split modes' epochs.
  IdList expand(const IdList& documents) const;

  // Numbering::tokens: the rows of `documents` (as expand's) in order, row r of block size
  // `block_of_row(r)` (>= 1), each document cut from its first token: the ids of the rows.
  template <typename BlockOfRow>
  IdList cut(const IdList& documents, BlockOfRow&& block_of_row) const {
    IdList rows = IdList::for_ids_below(first_token_.back(), static_cast<std::size_t>(size()));
    std::uint64_t r = 0;
    for (const std::uint64_t id : documents) {
      const std::uint64_t k = index_of(id);
      const std::uint64_t first = first_token_[static_cast<std::size_t>(k)];
      const std::uint64_t n = first_token_[static_cast<std::size_t>(k) + 1] - first;
      for (std::uint64_t o = 0; o + 1 < n; o += block_of_row(r++)) rows.push_back(first + o);
    }
    return rows;
  }
  // Numbering::tokens: the rows cut() makes of all documents at one block size T (pieces
  // at T + 1), whatever their order.
  std::uint64_t rows_at(std::uint64_t T) const noexcept;

  // The pieces at block size T (T + 1 tokens each) of all kept documents, numbered document
  // after document in the order of kept(): kept document k's are [first[k], first[k + 1]).
  struct PieceTable {
    std::uint64_t block_size = 0;      // T
    std::vector<std::uint64_t> first;  // kept().size() + 1 offsets
    std::uint64_t size() const noexcept { return first.back(); }
  };
  // REQUIRES: T >= 1.
  PieceTable table_at(std::uint64_t T) const;
  // Numbering::tokens: the id of piece number `u` of `table` (one of this' tables), the row
  // from its first token: first_token(k) + j*T for piece j of kept document k.
  // REQUIRES: u < table.size().
  std::uint64_t row_of(const PieceTable& table, std::uint64_t u) const noexcept;

 private:
  IdList kept_;
  std::uint64_t S_;
  std::vector<std::uint64_t> first_piece_;  // kept().size() + 1 offsets
  std::vector<std::uint64_t> first_token_;  // Numbering::tokens: kept().size() + 1 offsets; else empty
};

}  // namespace tokenfeed
