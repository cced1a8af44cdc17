// Shared by the tests of token files that index their documents (Megatron .idx, datatrove
// .ds.index): a document-aware batch checked against the tokens and document starts the
// test wrote; an SFT batch over the documents checked against them, and against the batch
// of the same documents written as an episode-indexed dataset.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "tokenfeed/batch.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed::test {

// Checks every row of `b` (random sampling: window_ids are token offsets into `tokens`, one
// file): x the tokens, doc_ids and position_ids restarting at each start, y the next token
// but -100 (weight 0) where it begins another document. Returns how many document starts
// fell inside the rows.
template <typename Tokens>
std::size_t check_document_rows(const Batch& b, std::size_t rows, std::size_t T, const Tokens& tokens,
                                const std::set<std::uint64_t>& starts) {
  std::size_t boundaries = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const auto offset = static_cast<std::uint64_t>(b.window_ids()[r]);
    std::int32_t doc = 0, position = 0;
    for (std::size_t i = 0; i < T; ++i) {
      CAPTURE(offset);
      CAPTURE(i);
      if (i > 0 && starts.count(offset + i) == 1) {
        ++doc;
        position = 0;
        ++boundaries;
      }
      CHECK(b.x()[r * T + i] == tokens[offset + i]);
      CHECK(b.doc_ids()[r * T + i] == doc);
      CHECK(b.position_ids()[r * T + i] == position++);
      const bool crosses = starts.count(offset + i + 1) == 1;
      CHECK(b.y()[r * T + i] == (crosses ? -100 : static_cast<std::int64_t>(tokens[offset + i + 1])));
      CHECK(b.token_weights()[r * T + i] == (crosses ? 0.0f : 1.0f));
    }
  }
  return boundaries;
}

// Checks every segment of `b` (sft_episode or sft_packed with truncation=right, block T)
// against `documents`, the tokens of each document: its first positions + 1 tokens as
// inputs and labels, every label trained (no mask), positions from 0. Returns the segments.
template <typename Documents>
std::size_t check_document_segments(const Batch& b, std::size_t T, const Documents& documents) {
  for (const PackedSegment& s : b.segments()) {
    REQUIRE(s.episode >= 0);
    REQUIRE(static_cast<std::size_t>(s.episode) < documents.size());
    const auto& doc = documents[static_cast<std::size_t>(s.episode)];
    CAPTURE(s.episode);
    REQUIRE(s.positions + 1 <= doc.size());
    CHECK((s.positions + 1 == doc.size() || s.positions == T));  // the whole document, or its first row
    for (std::size_t i = 0; i < s.positions; ++i) {
      const std::size_t at = s.row * T + s.column + i;
      CHECK(b.tokens()[at] == static_cast<std::int64_t>(doc[i]));
      CHECK(b.labels()[at] == static_cast<std::int64_t>(doc[i + 1]));
      CHECK(b.token_weights()[at] == 1.0f);
      CHECK(b.position_ids()[at] == static_cast<std::int32_t>(i));
    }
  }
  return b.segments().size();
}

// Checks that `a` and `b` hand out the same `count` batches of `split`, field by field.
inline void check_same_batches(Loader& a, Loader& b, std::size_t count, const char* split = "train") {
  const auto same = [](auto x, auto y) { return std::vector(x.begin(), x.end()) == std::vector(y.begin(), y.end()); };
  for (std::size_t k = 0; k < count; ++k) {
    CAPTURE(k);
    const Batch x = a.get_batch(split);
    const Batch y = b.get_batch(split);
    CHECK(x.epoch() == y.epoch());
    CHECK(same(x.tokens(), y.tokens()));
    CHECK(same(x.labels(), y.labels()));
    CHECK(same(x.token_weights(), y.token_weights()));
    CHECK(same(x.position_ids(), y.position_ids()));
    CHECK(same(x.cu_seqlens(), y.cu_seqlens()));
    CHECK(same(x.episode_ids(), y.episode_ids()));
    REQUIRE(x.segments().size() == y.segments().size());
    for (std::size_t i = 0; i < x.segments().size(); ++i) {
      CHECK(x.segments()[i].episode == y.segments()[i].episode);
      CHECK(x.segments()[i].column == y.segments()[i].column);
      CHECK(x.segments()[i].positions == y.segments()[i].positions);
    }
  }
}

}  // namespace tokenfeed::test
