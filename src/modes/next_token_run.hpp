// Writing a run of a row: `count` input positions, each with its next token as target,
// the loss weight of that target, the label (the target where the weight is not 0,
// ignore_index where it is) and the position within its sequence. Each field is written
// in a pass of its own over the run, which the compiler vectorises: one store stream at
// a time writes faster than all the fields interleaved, and the run's tokens stay in L1
// between the passes (perf/RESULTS_by_hand.md). The batch sources call this for each
// contiguous run of an episode or window, and write_padding_run for the padding after
// it. Both are compiled for several instruction sets (x86-64: the baseline, AVX2 and
// AVX-512) and run with the widest the CPU has, since writing the batch is most of what a
// decoder does.
//
// Thread-safety: write_* are pure functions of their arguments; use_row_kernel_isa must not
// run concurrently with them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

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

// Hints the CPU to start loading a run's tokens[0, count] and mask values (as
// write_next_token_run would read them), without waiting: for the next row, while this
// one is written. A hint: reads nothing.
void prefetch_next_token_run(const NextTokenSource& source, std::size_t count) noexcept;

// Writes a row's padding, positions [0, count) of `fields`, in one pass: x and y `pad`,
// weight 0, label ignore_index, positions first_position, first_position + 1, ... (0 for
// a row's trailing padding, a sequence of its own; a sequence's own count for its
// context-parallel padding). Null fields are not written. REQUIRES: labels and positions
// both null or both set.
void write_padding_run(std::size_t count, const NextTokenFields& fields, std::int64_t pad, std::int64_t ignore_index,
                       std::int32_t first_position = 0) noexcept;

// The instruction sets the kernels are built for, and which of them runs. Every set
// writes the same values (tests run each one the CPU has against a reference).
enum class RowKernelIsa { baseline = 0, x86_64_v3 = 1, x86_64_v4 = 2 };
// Those this CPU runs, baseline first, the widest last (the one in use unless changed).
std::vector<RowKernelIsa> row_kernel_isas();
RowKernelIsa row_kernel_isa() noexcept;
// For tests and benchmarks: run `isa`'s kernels from now on. REQUIRES: isa is in
// row_kernel_isas(), and no write_* call runs concurrently.
void use_row_kernel_isa(RowKernelIsa isa) noexcept;
const char* to_string(RowKernelIsa isa) noexcept;

}  // namespace tokenfeed
