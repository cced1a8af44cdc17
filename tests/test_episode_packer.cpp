// pack_episodes against a reference packer written here, the rule as the header states it
// and in the plainest form (a window of ids, each length looked up where it is compared):
// random orders, lengths, lookaheads, padded lengths, document pieces and stages of
// changing capacity must give the same rows, id for id.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>

#include "sampling/episode_packer.hpp"

using namespace tokenfeed;

namespace {

// The rule: a row opens with the oldest unplaced id; then, while some id of the window (the
// `lookahead` oldest unplaced) fits the gap, the longest fitting one is placed, the
// earliest on ties; a piece (follows[id]) is passed over while id - 1 is unplaced. The
// capacity and lengths are those of the stage the row is in.
PackedEpoch reference_pack(const std::vector<std::uint64_t>& order, const std::vector<PackStage>& stages,
                           std::size_t lookahead, const std::vector<bool>& follows) {
  PackedEpoch out;
  out.row_begin.push_back(0);
  std::vector<bool> placed(follows.empty() ? 0 : follows.size(), false);
  std::vector<std::uint64_t> window;
  std::size_t next = 0;
  const auto refill = [&] {
    while (window.size() < lookahead && next < order.size()) window.push_back(order[next++]);
  };
  const auto place = [&](std::size_t i, const PackStage& s) {
    const std::uint64_t id = window[i];
    out.episodes.push_back(id);
    out.positions += (*s.positions_of)[id];
    if (!placed.empty()) placed[id] = true;
    window.erase(window.begin() + static_cast<std::ptrdiff_t>(i));
    refill();
  };
  refill();
  while (!window.empty()) {
    const std::uint64_t row = out.row_begin.size() - 1;
    std::size_t s = 0;
    for (std::size_t k = 0; k < stages.size(); ++k) {
      if (stages[k].first_row <= row) s = k;
    }
    const PackStage& stage = stages[s];
    const auto occupies = [&stage](std::uint64_t id) {
      return stage.occupied_of != nullptr ? (*stage.occupied_of)[id] : (*stage.positions_of)[id];
    };
    std::uint32_t free = stage.capacity - occupies(window[0]);
    place(0, stage);
    for (;;) {
      std::size_t best = window.size();
      for (std::size_t i = 0; i < window.size(); ++i) {
        const std::uint64_t id = window[i];
        if (!follows.empty() && follows[id] && !placed[id - 1]) continue;
        if (occupies(id) > free) continue;
        if (best == window.size() || occupies(id) > occupies(window[best])) best = i;
      }
      if (best == window.size()) break;
      free -= occupies(window[best]);
      place(best, stage);
    }
    out.row_begin.push_back(out.episodes.size());
  }
  return out;
}

struct Lengths {
  std::uint32_t capacity = 0;
  std::vector<std::uint32_t> positions, occupied;
};

// Lengths in [1, capacity] for `ids` ids (often short, sometimes the whole row), padded to
// `multiple` when it is above 1 (capacity a multiple of it).
Lengths random_lengths(std::mt19937_64& rng, std::size_t ids, std::uint32_t capacity, std::uint32_t multiple) {
  Lengths l;
  l.capacity = capacity;
  std::uniform_int_distribution<std::uint32_t> any(1, capacity), short_one(1, std::max(1u, capacity / 6));
  for (std::size_t i = 0; i < ids; ++i) l.positions.push_back(rng() % 3 == 0 ? any(rng) : short_one(rng));
  if (multiple > 1) l.occupied = occupied_padded(l.positions, multiple);
  return l;
}

}  // namespace

TEST_CASE("packer: the same rows as the reference packer, over random orders, lengths, pieces and stages") {
  std::mt19937_64 rng(20261129);
  int with_pieces = 0, with_stages = 0, with_padding = 0, reordered = 0;
  for (int trial = 0; trial < 600; ++trial) {
    CAPTURE(trial);
    // Documents of 1 to 4 pieces (ids consecutive, pieces in order in `order`) or whole
    // episodes, in a random order of the documents.
    const bool pieces = trial % 3 == 1;
    const std::size_t documents = std::uniform_int_distribution<std::size_t>(0, 160)(rng);
    std::vector<std::vector<std::uint64_t>> docs;
    std::vector<bool> follows;
    std::uint64_t ids = 0;
    for (std::size_t d = 0; d < documents; ++d) {
      const std::size_t n = pieces ? 1 + rng() % 4 : 1;
      std::vector<std::uint64_t>& doc = docs.emplace_back();
      for (std::size_t k = 0; k < n; ++k) {
        doc.push_back(ids++);
        follows.push_back(k > 0);
      }
    }
    if (!pieces) follows.clear();
    std::shuffle(docs.begin(), docs.end(), rng);
    std::vector<std::uint64_t> order;
    for (const auto& doc : docs) order.insert(order.end(), doc.begin(), doc.end());

    const std::size_t lookaheads[] = {1, 2, 3, 5, 8, 64, 200};
    const std::size_t lookahead = lookaheads[rng() % 7];
    const std::uint32_t multiple = trial % 4 == 2 ? 1u << (1 + rng() % 3) : 1;  // 2, 4 or 8
    // One to three stages (a row capacity each, lengths at it), from row 0 on.
    const std::size_t stage_count = trial % 5 == 3 ? 2 + rng() % 2 : 1;
    std::vector<Lengths> lengths;
    std::vector<PackStage> stages;
    std::uint64_t first_row = 0;
    for (std::size_t s = 0; s < stage_count; ++s) {
      const std::uint32_t capacity = multiple * static_cast<std::uint32_t>(1 + rng() % 24);
      lengths.push_back(random_lengths(rng, static_cast<std::size_t>(ids), capacity, multiple));
    }
    for (std::size_t s = 0; s < stage_count; ++s) {
      const Lengths& l = lengths[s];
      stages.push_back({first_row, l.capacity, &l.positions, l.occupied.empty() ? nullptr : &l.occupied});
      first_row += 1 + rng() % 12;
    }
    with_pieces += pieces && ids > static_cast<std::uint64_t>(documents) ? 1 : 0;
    with_stages += stage_count > 1 ? 1 : 0;
    with_padding += multiple > 1 ? 1 : 0;

    const PackedEpoch want = reference_pack(order, stages, lookahead, follows);
    const PackedEpoch got = pack_episodes(IdList(order), stages, lookahead, follows);
    CHECK(got.episodes == want.episodes);
    CHECK(got.row_begin == want.row_begin);
    CHECK(got.positions == want.positions);
    if (stage_count == 1) {  // the one-stage form is the same packer
      const PackedEpoch one = pack_episodes(IdList(order), lengths[0].positions, lengths[0].capacity, lookahead,
                                            follows, lengths[0].occupied.empty() ? nullptr : &lengths[0].occupied);
      CHECK(one.episodes == want.episodes);
      CHECK(one.row_begin == want.row_begin);
    }
    reordered += want.episodes != order ? 1 : 0;
  }
  // The cases reached what they are for.
  CHECK(with_pieces > 100);
  CHECK(with_stages > 60);
  CHECK(with_padding > 60);
  CHECK(reordered > 300);
}

namespace {

// The rule of pack_pieces, in its plainest form: the unplaced pieces are, document after
// document in epoch order, each document's tokens not yet placed cut at the capacity in
// force, recut at every change of capacity from the first token of the document's oldest
// unplaced piece; a row is then filled as above from the first `lookahead` of them, a
// piece passed over while an older piece of its document is unplaced.
struct RefPiece {
  std::uint64_t id = 0;  // kept id of the document
  std::uint64_t first = 0;
};

PackedEpoch reference_pack_pieces(const std::vector<std::uint64_t>& order, const std::vector<std::uint64_t>& tokens,
                                  const std::vector<PieceStage>& stages, std::size_t lookahead,
                                  std::uint32_t multiple) {
  std::vector<std::uint64_t> first_token(tokens.size() + 1, 0);  // ids ascending
  for (std::size_t id = 0; id < tokens.size(); ++id) first_token[id + 1] = first_token[id] + tokens[id];
  std::uint32_t capacity = stages[0].capacity;
  const auto cut_from = [&](std::vector<RefPiece>& into, std::uint64_t id, std::uint64_t first) {
    for (std::uint64_t o = first; o + 1 < tokens[id]; o += capacity) into.push_back({id, o});
  };
  std::vector<RefPiece> unplaced;
  for (const std::uint64_t id : order) cut_from(unplaced, id, 0);
  const auto positions = [&](const RefPiece& p) {
    return std::min<std::uint64_t>(capacity, tokens[p.id] - 1 - p.first);
  };
  const auto occupies = [&](const RefPiece& p) { return (positions(p) + multiple - 1) / multiple * multiple; };
  PackedEpoch out;
  out.row_begin.push_back(0);
  const auto place = [&](std::size_t i) {
    out.episodes.push_back(first_token[unplaced[i].id] + unplaced[i].first);
    out.positions += positions(unplaced[i]);
    out.unit_positions.push_back(static_cast<std::uint32_t>(positions(unplaced[i])));
    unplaced.erase(unplaced.begin() + static_cast<std::ptrdiff_t>(i));
  };
  while (!unplaced.empty()) {
    const std::uint64_t row = out.row_begin.size() - 1;
    std::uint32_t now = stages[0].capacity;
    for (const PieceStage& s : stages) {
      if (s.first_row <= row) now = s.capacity;
    }
    if (now != capacity) {  // every document's unplaced tokens cut anew
      capacity = now;
      std::vector<RefPiece> recut;
      for (std::size_t i = 0; i < unplaced.size(); ++i) {
        if (i == 0 || unplaced[i - 1].id != unplaced[i].id) cut_from(recut, unplaced[i].id, unplaced[i].first);
      }
      unplaced = std::move(recut);
    }
    std::uint64_t free = capacity - occupies(unplaced[0]);
    place(0);
    for (;;) {
      std::size_t best = unplaced.size();
      for (std::size_t i = 0; i < std::min(lookahead, unplaced.size()); ++i) {
        const bool waits = std::any_of(unplaced.begin(), unplaced.begin() + static_cast<std::ptrdiff_t>(i),
                                       [&](const RefPiece& p) { return p.id == unplaced[i].id; });
        if (waits || occupies(unplaced[i]) > free) continue;
        if (best == unplaced.size() || occupies(unplaced[i]) > occupies(unplaced[best])) best = i;
      }
      if (best == unplaced.size()) break;
      free -= occupies(unplaced[best]);
      place(best);
    }
    out.row_begin.push_back(out.episodes.size());
  }
  return out;
}

}  // namespace

TEST_CASE("packer: documents cut while packed give the reference's rows, and one capacity gives the pieces' rows") {
  std::mt19937_64 rng(20261130);
  int recut = 0, long_documents = 0;
  for (int trial = 0; trial < 400; ++trial) {
    CAPTURE(trial);
    const std::uint32_t multiple = trial % 4 == 2 ? 1u << (1 + rng() % 3) : 1;
    const std::size_t stage_count = trial % 3 == 0 ? 1 : 2 + rng() % 2;
    std::vector<PieceStage> stages;
    std::uint64_t first_row = 0;
    std::uint32_t longest = 0;
    for (std::size_t s = 0; s < stage_count; ++s) {
      const std::uint32_t capacity = multiple * static_cast<std::uint32_t>(1 + rng() % 16);
      stages.push_back({first_row, capacity});
      longest = std::max(longest, capacity);
      first_row += 1 + rng() % 10;
    }
    // Documents of 2 tokens to five of the longest rows, in a random order.
    const std::size_t documents = std::uniform_int_distribution<std::size_t>(1, 120)(rng);
    std::vector<std::uint64_t> tokens;
    for (std::size_t d = 0; d < documents; ++d) {
      const std::uint64_t most = rng() % 4 == 0 ? 5ull * longest + 1 : longest / 2 + 2;
      tokens.push_back(std::uniform_int_distribution<std::uint64_t>(2, most)(rng));
      long_documents += tokens.back() > longest + 1 ? 1 : 0;
    }
    std::vector<std::uint64_t> order(documents);
    for (std::size_t d = 0; d < documents; ++d) order[d] = d;
    std::shuffle(order.begin(), order.end(), rng);
    const std::size_t lookaheads[] = {1, 2, 3, 5, 8, 64};
    const std::size_t lookahead = lookaheads[rng() % 6];

    const DocumentPieces pieces(
        IdList::iota(documents), stages[0].capacity + 1ull, [&tokens](std::uint64_t id) { return tokens[id]; },
        DocumentPieces::Numbering::tokens);
    const PackedEpoch want = reference_pack_pieces(order, tokens, stages, lookahead, multiple);
    const PackedEpoch got = pack_pieces(IdList(order), pieces, stages, lookahead, multiple);
    CHECK(got.episodes == want.episodes);
    CHECK(got.row_begin == want.row_begin);
    CHECK(got.positions == want.positions);
    CHECK(got.unit_positions == want.unit_positions);
    recut += stage_count > 1 && got.rows() > stages[1].first_row ? 1 : 0;

    // One capacity: pack_episodes over DocumentPieces' pieces at S = capacity + 1, each
    // piece listed by its first token's number.
    const std::uint32_t C = stages[0].capacity;
    const DocumentPieces numbered(IdList::iota(documents), C + 1ull,
                                  [&tokens](std::uint64_t id) { return tokens[id]; });
    std::vector<std::uint32_t> positions(static_cast<std::size_t>(numbered.size()));
    std::vector<bool> follows(positions.size());
    std::vector<std::uint64_t> token_of(positions.size());
    for (std::uint64_t k = 0; k < documents; ++k) {
      for (std::uint64_t u = numbered.first_piece(k); u < numbered.first_piece(k + 1); ++u) {
        const std::uint64_t o = (u - numbered.first_piece(k)) * C;
        positions[u] = static_cast<std::uint32_t>(std::min<std::uint64_t>(C, tokens[k] - 1 - o));
        follows[u] = u != numbered.first_piece(k);
        token_of[u] = pieces.first_token(k) + o;
      }
    }
    const std::vector<std::uint32_t> occupied = occupied_padded(positions, multiple);
    const PackedEpoch by_pieces = pack_episodes(numbered.expand(IdList(order)), positions, C, lookahead, follows,
                                                multiple > 1 ? &occupied : nullptr);
    const PackedEpoch one = pack_pieces(IdList(order), pieces, {PieceStage{0, C}}, lookahead, multiple);
    std::vector<std::uint64_t> as_tokens;
    for (const std::uint64_t u : by_pieces.episodes) as_tokens.push_back(token_of[u]);
    CHECK(one.episodes == as_tokens);
    CHECK(one.row_begin == by_pieces.row_begin);
  }
  CHECK(recut > 150);
  CHECK(long_documents > 1000);
}
