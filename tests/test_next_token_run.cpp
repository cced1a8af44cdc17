// The fused row kernels (write_next_token_run, write_padding_run) against a
// one-field-at-a-time reference, for every token dtype, mask kind and set of written
// fields, at lengths around the vector widths and at unaligned output offsets, with each
// instruction set's kernels the CPU runs.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "modes/next_token_run.hpp"

using namespace tokenfeed;

namespace {

struct Fields {
  std::vector<std::int64_t> x, y, labels;
  std::vector<float> weights;
  std::vector<std::int32_t> positions;
  explicit Fields(std::size_t n) : x(n, -7), y(n, -7), labels(n, -7), weights(n, -7.0f), positions(n, -7) {}
  bool operator==(const Fields&) const = default;

  // The kernel's outputs into these vectors from `offset` on: x always, the others when
  // asked for (labels and positions together, as the batch contract does).
  NextTokenFields outputs(std::size_t offset, bool with_y, bool with_weights, bool contract) {
    NextTokenFields f;
    f.x = x.data() + offset;
    if (with_y) f.y = y.data() + offset;
    if (with_weights) f.weights = weights.data() + offset;
    if (contract) {
      f.labels = labels.data() + offset;
      f.positions = positions.data() + offset;
    }
    return f;
  }
};

// What the kernel must write, one field at a time, from the values as numbers.
void reference(const std::vector<std::uint32_t>& tokens, const std::vector<float>* weights, std::size_t offset,
               std::size_t count, std::int32_t p0, bool y, bool w, bool contract, std::int64_t ignore, Fields& out) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t o = offset + i;
    const std::int64_t target = tokens[i + 1];
    const float weight = weights != nullptr ? (*weights)[i + 1] : 1.0f;
    out.x[o] = tokens[i];
    if (y) out.y[o] = target;
    if (w) out.weights[o] = weight;
    if (contract) {
      out.labels[o] = weight != 0.0f ? target : ignore;
      out.positions[o] = p0 + static_cast<std::int32_t>(i);
    }
  }
}

}  // namespace

// Runs `body` once with each instruction set's kernels this CPU has, then restores the
// best (the one the library runs with).
template <typename Body>
void for_each_kernel_isa(Body body) {
  const std::vector<RowKernelIsa> isas = row_kernel_isas();
  REQUIRE(row_kernel_isa() == isas.back());
  for (const RowKernelIsa isa : isas) {
    use_row_kernel_isa(isa);
    CAPTURE(to_string(isa));
    body();
  }
  use_row_kernel_isa(isas.back());
}

TEST_CASE(
    "write_next_token_run writes what one pass per field would, for every dtype, mask and field set, in every "
    "instruction set") {
  for_each_kernel_isa([] {
    std::mt19937 rng(11);
    const std::int64_t ignore = -100;
    for (const TokenDtype dtype : {TokenDtype::uint16, TokenDtype::uint32}) {
      for (const int mask_kind : {0, 1, 2}) {  // none, uint8, float32
        for (const std::size_t count :
             {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{16}, std::size_t{33}, std::size_t{1023}}) {
          std::vector<std::uint32_t> tokens(count + 1);
          for (auto& t : tokens) t = dtype == TokenDtype::uint16 ? rng() % 65536 : rng();
          std::vector<std::uint16_t> t16(tokens.begin(), tokens.end());
          std::vector<std::uint8_t> bytes(count + 1);
          std::vector<float> floats(count + 1), as_weights(count + 1);
          for (std::size_t i = 0; i <= count; ++i) {
            const unsigned r = rng() % 4;
            bytes[i] = r == 0 ? 0 : r == 1 ? 1 : static_cast<std::uint8_t>(rng() % 256);  // flipped bits read as 1
            floats[i] = r == 0 ? 0.0f : r == 1 ? -0.0f : static_cast<float>(rng() % 1000) / 100.0f;
            as_weights[i] = mask_kind == 1 ? (bytes[i] != 0 ? 1.0f : 0.0f) : floats[i];
          }
          NextTokenSource source;
          source.token_dtype = dtype;
          source.tokens = dtype == TokenDtype::uint16 ? reinterpret_cast<const std::byte*>(t16.data())
                                                      : reinterpret_cast<const std::byte*>(tokens.data());
          if (mask_kind == 1) {
            source.mask = reinterpret_cast<const std::byte*>(bytes.data());
            source.mask_dtype = MaskDtype::uint8;
          } else if (mask_kind == 2) {
            source.mask = reinterpret_cast<const std::byte*>(floats.data());
            source.mask_dtype = MaskDtype::float32;
          }
          for (int fields_set = 0; fields_set < 8; ++fields_set) {
            const bool y = (fields_set & 1) != 0, w = (fields_set & 2) != 0, contract = (fields_set & 4) != 0;
            const std::size_t offset = 3;  // outputs not at a vector boundary
            Fields got(count + 8), want(count + 8);
            write_next_token_run(source, count, 5, got.outputs(offset, y, w, contract), ignore);
            reference(tokens, mask_kind == 0 ? nullptr : &as_weights, offset, count, 5, y, w, contract, ignore, want);
            CAPTURE(count);
            CAPTURE(mask_kind);
            CAPTURE(fields_set);
            CHECK(got == want);
          }
        }
      }
    }
  });
}

TEST_CASE(
    "write_padding_run writes pad, weight 0, ignore_index and positions from the first one, in every instruction set") {
  for_each_kernel_isa([] {
    for (const std::size_t count :
         {std::size_t{0}, std::size_t{1}, std::size_t{9}, std::size_t{64}, std::size_t{1021}}) {
      for (int fields_set = 0; fields_set < 16; ++fields_set) {
        const bool y = (fields_set & 1) != 0, w = (fields_set & 2) != 0, contract = (fields_set & 4) != 0;
        // A row's trailing padding counts from 0; a sequence's context-parallel padding
        // continues the sequence's positions.
        const std::int32_t p0 = (fields_set & 8) != 0 ? 37 : 0;
        const std::size_t offset = 5;
        Fields got(count + 8), want(count + 8);
        if (p0 == 0) {
          write_padding_run(count, got.outputs(offset, y, w, contract), 50256, -100);
        } else {
          write_padding_run(count, got.outputs(offset, y, w, contract), 50256, -100, p0);
        }
        for (std::size_t i = 0; i < count; ++i) {
          want.x[offset + i] = 50256;
          if (y) want.y[offset + i] = 50256;
          if (w) want.weights[offset + i] = 0.0f;
          if (contract) {
            want.labels[offset + i] = -100;
            want.positions[offset + i] = p0 + static_cast<std::int32_t>(i);
          }
        }
        CAPTURE(count);
        CAPTURE(fields_set);
        CHECK(got == want);
      }
    }
  });
}
