// Shared by the tests of token files that index their documents (Megatron .idx, datatrove
// .ds.index): a document-aware batch checked against the tokens and document starts the
// test wrote.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <set>

#include "tokenfeed/batch.hpp"

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

}  // namespace tokenfeed::test
