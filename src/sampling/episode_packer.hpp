// Packing whole episodes into rows: the deterministic packer of the sft_packed mode.
//
// Rows are filled from an epoch's episode order. A row starts with the oldest episode not
// yet placed; its gap is then filled from a lookahead window over the next `lookahead`
// unplaced episodes, taking the longest one that fits (the earliest on ties), until none
// fits. Every episode is placed exactly once. The result is a pure function of
// (order, lengths, row capacity, lookahead, follows).
//
// The ids may be pieces of documents (truncation=split), a document's pieces consecutive
// both in `order` and as ids: an id u with follows[u] set is the next piece after u - 1,
// and is never placed before it (it is passed over while u - 1 is in the window). So a
// document's pieces keep their order in the packed stream.
//
// How far an episode strays from the epoch order. With L = lookahead, let the episode at
// epoch position i (order[i]) be placed at position k of `episodes`, in row r(k), and let
// r(i) be the row holding position i of `episodes` (where it would be with no reordering):
//
//   early side, in places:  k >= i - (L - 1)
//   late side, in rows:     r(k) <= r(i) + (L - 1)
//
// Both are attained. The late side cannot be stated in places: a long episode that fits
// no gap waits while up to L - 1 rows are filled, and each of those rows may hold many
// short episodes (a wait of several times L places is common at L = 64). In batches of
// B*W rows that is at most ceil((L - 1) / (B*W)) global batches after the batch holding
// position i.
//
// Why (from pack_episodes): the window always holds the min(L, unplaced) oldest unplaced
// episodes, because it takes episodes from `order` in order, keeps their order, and is
// refilled after every placement. So an episode is placed only from the window, and:
//  - Early: when order[i] is placed, at most L - 1 older episodes are still unplaced (all
//    in the window ahead of it), so at least i - (L - 1) were placed before it.
//  - Late: while the window holds only older episodes, only older episodes are placed; so
//    order[i] (i >= L) enters the window right after position i - L is placed, in row
//    R = r(i - L), with L - 1 older episodes unplaced. Every later row opens with the oldest
//    unplaced episode, which is older than order[i] while any older one is unplaced, so each
//    row after R places at least one of them until order[i] itself opens a row: with u older
//    ones left at the end of row R, r(k) <= R + u + 1. If position i - L ends row R, then
//    u <= L - 1 and r(i) >= R + 1; otherwise position i - L + 1 is placed in row R from a
//    window of L - 1 older episodes and order[i], so u <= L - 2 (or k is in row R) and
//    r(i) >= R. Either way r(k) <= r(i) + L - 1. For i < L the episode is in the first
//    window, and r(k) <= i <= L - 1.
// A piece passed over for its predecessor changes none of this: both arguments use only
// the window's invariant and the rows' openers, and the oldest unplaced id, whose
// predecessor is older and so placed, is always placeable.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/document_pieces.hpp"
#include "util/id_list.hpp"

namespace tokenfeed {

struct PackedEpoch {
  std::vector<std::uint64_t> episodes;   // the units' ids (episodes, or pieces), row after row
  std::vector<std::uint64_t> row_begin;  // rows() + 1 offsets into `episodes`
  std::uint64_t positions = 0;           // input positions the episodes hold, all rows together
                                         // (their padding to `multiple` not counted)
  // pack_pieces: each listed unit's input positions, beside `episodes` (a piece's length is
  // that of its row, not a function of its id alone); empty from pack_episodes.
  std::vector<std::uint32_t> unit_positions;
  std::uint64_t rows() const noexcept { return row_begin.empty() ? 0 : row_begin.size() - 1; }
};

// `positions_of[id]` is the number of input positions episode `id` holds (its kept
// length - 1), in [1, capacity]. `occupied_of`, when not null, is what each occupies in a
// row instead (context parallelism pads every sequence to a multiple of 2·cp positions:
// occupied_padded), and the packer fits those lengths everywhere above; PackedEpoch's
// positions still counts positions_of. `follows` is empty, or says per id whether it is a
// piece that follows id - 1 (above). REQUIRES: every id in `order` indexes positions_of
// (and occupied_of, follows, when given); lookahead >= 1; occupied_of[id] in
// [positions_of[id], capacity]; capacity < 2^31 (config bounds block_size by 2^26).
PackedEpoch pack_episodes(const IdList& order, const std::vector<std::uint32_t>& positions_of, std::uint32_t capacity,
                          std::size_t lookahead, const std::vector<bool>& follows = {},
                          const std::vector<std::uint32_t>* occupied_of = nullptr);

// Rows of changing length (a sequence-length curriculum): from row `first_row` of the
// packing on, rows hold `capacity` positions and episodes the lengths given for it.
struct PackStage {
  std::uint64_t first_row = 0;
  std::uint32_t capacity = 0;
  const std::vector<std::uint32_t>* positions_of = nullptr;  // as above, at this capacity
  const std::vector<std::uint32_t>* occupied_of = nullptr;   // as above; null: positions_of
};
// The same packer over rows whose capacity changes at each stage's first row: when it
// changes, the packer goes on with the episodes not yet placed (the window and its
// invariant, hence the bounds above, carry over) at the new capacity and lengths. With
// one stage this is exactly the pack_episodes above. REQUIRES: stages non-empty, the first
// at row 0, first rows increasing; each stage's lengths as above for its capacity.
PackedEpoch pack_episodes(const IdList& order, const std::vector<PackStage>& stages, std::size_t lookahead,
                          const std::vector<bool>& follows = {});

// Documents cut while they are packed (truncation=split under a sequence-length curriculum,
// where a piece's length is that of the row it lands in). The units are pieces of the
// documents of `documents` (kept ids of `pieces`, each once, in epoch order) cut at the
// capacity C in force: the piece from token o of a document of n tokens holds
// t[o : min(n, o + C + 1)] (its positions: min(C, n - 1 - o)) and the next one starts at
// o + C, as DocumentPieces cuts. A document's pieces enter the window in order, each cut at
// the capacity in force, and wait for their predecessors as above; where a stage changes
// the capacity, every document with pieces not yet placed is cut anew at the new capacity
// from the first token of its oldest unplaced piece, so a row holds only pieces cut at its
// own capacity and each label position of a document is in exactly one piece. The window's
// invariant, hence the bounds above, hold in the order of the pieces as cut. With one
// capacity this is pack_episodes over the pieces DocumentPieces cuts at S = C + 1 (lengths
// padded to `multiple` as occupied_padded does), each listed by its first token's number
// (DocumentPieces::Numbering::tokens) instead of its piece number. REQUIRES: pieces
// numbered by tokens; stages as above; lookahead >= 1; multiple >= 1 divides every
// capacity.
struct PieceStage {
  std::uint64_t first_row = 0;
  std::uint32_t capacity = 0;
};
PackedEpoch pack_pieces(const IdList& documents, const DocumentPieces& pieces, const std::vector<PieceStage>& stages,
                        std::size_t lookahead, std::uint32_t multiple = 1);

// positions_of, each rounded up to a multiple of `multiple` (>= 1): the lengths
// pack_episodes fits with context-parallel padding.
std::vector<std::uint32_t> occupied_padded(const std::vector<std::uint32_t>& positions_of, std::uint32_t multiple);

}  // namespace tokenfeed
