// Writing a run of a row in one pass: `count` input positions, each with its next token
// as target, the loss weight of that target, the label (the target where the weight is
// not 0, ignore_index where it is) and the position within its sequence. Each token and
// mask value is read once and every field is written in the same pass, which the
// compiler vectorises; the batch sources call this for each contiguous run of an
// episode or window instead of one pass per field.
//
// Thread-safety: a pure function of its arguments.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tokenfeed/dtype.hpp"

namespace tokenfeed {

// Where a run's tokens come from: `tokens` points at the run's first input token and
// `mask` (null: every target has weight 1) at that token's mask value; the target of
// input i is tokens[i + 1], weighted by mask[i + 1] (a uint8 mask reads as 0 or 1, any
// non-zero byte as 1; a float32 mask as it is).
struct NextTokenSource {
  const std::byte* tokens = nullptr;
  TokenDtype token_dtype = TokenDtype::uint16;
  const std::byte* mask = nullptr;
  MaskDtype mask_dtype = MaskDtype::uint8;
};

// The fields a run writes, each pointing at the run's first position; null: not written.
// `labels` and `positions` go together (the batch contract's view).
struct NextTokenFields {
  std::int64_t* x = nullptr;          // the inputs (always written)
  std::int64_t* y = nullptr;          // the targets as they are
  float* weights = nullptr;           // the targets' weights
  std::int64_t* labels = nullptr;     // targets, ignore_index where the weight is 0
  std::int32_t* positions = nullptr;  // first_position, first_position + 1, ...
};

// Writes positions [0, count) of `fields` from `source`. REQUIRES: tokens[0, count] and
// (with a mask) mask[1, count] readable; labels and positions both null or both set.
void write_next_token_run(const NextTokenSource& source, std::size_t count, std::int32_t first_position,
                          const NextTokenFields& fields, std::int64_t ignore_index) noexcept;

}  // namespace tokenfeed
