#include "modes/next_token_run.hpp"

namespace tokenfeed {
namespace {

// The weight of target i, by mask kind; constructed with a pointer to the first target's
// mask value (the run's second).
struct NoMask {
  float at(std::size_t) const noexcept { return 1.0f; }
};
struct FloatMask {
  const float* __restrict m;
  float at(std::size_t i) const noexcept { return m[i]; }
};

// One instantiation per combination of token type, mask kind and written fields, so that
// the loop holds no branch on them and vectorises. The fields never overlap each other or
// the mapped data (restrict: no run-time overlap checks).
template <typename Token, typename Mask, bool kY, bool kWeights, bool kContract>
void run(const Token* __restrict t, Mask mask, std::size_t count, std::int32_t first_position,
         std::int64_t* __restrict x, std::int64_t* __restrict y, float* __restrict weights,
         std::int64_t* __restrict labels, std::int32_t* __restrict positions, std::int64_t ignore_index) noexcept {
  std::int32_t position = first_position;
  for (std::size_t i = 0; i < count; ++i, ++position) {
    const auto target = static_cast<std::int64_t>(t[i + 1]);
    const float w = mask.at(i);
    x[i] = static_cast<std::int64_t>(t[i]);
    if constexpr (kY) y[i] = target;
    if constexpr (kWeights) weights[i] = w;
    if constexpr (kContract) {
      // Branch-free select (all ones where the target is trained), which vectorises where
      // a conditional of mixed widths does not.
      const std::int64_t trained = -static_cast<std::int64_t>(w != 0.0f);
      labels[i] = (target & trained) | (ignore_index & ~trained);
      positions[i] = position;
    }
  }
}

template <typename Token, typename Mask, bool kY, bool kWeights>
void by_contract(const Token* t, Mask mask, std::size_t count, std::int32_t p0, const NextTokenFields& f,
                 std::int64_t ignore) noexcept {
  if (f.labels != nullptr) {
    run<Token, Mask, kY, kWeights, true>(t, mask, count, p0, f.x, f.y, f.weights, f.labels, f.positions, ignore);
  } else {
    run<Token, Mask, kY, kWeights, false>(t, mask, count, p0, f.x, f.y, f.weights, f.labels, f.positions, ignore);
  }
}

// kWeights: write f.weights from the mask (false when they hold it already, or are not wanted).
template <typename Token, typename Mask>
void by_fields(const Token* t, Mask mask, bool write_weights, std::size_t count, std::int32_t p0,
               const NextTokenFields& f, std::int64_t ignore) noexcept {
  if (f.y != nullptr) {
    if (write_weights) return by_contract<Token, Mask, true, true>(t, mask, count, p0, f, ignore);
    return by_contract<Token, Mask, true, false>(t, mask, count, p0, f, ignore);
  }
  if (write_weights) return by_contract<Token, Mask, false, true>(t, mask, count, p0, f, ignore);
  return by_contract<Token, Mask, false, false>(t, mask, count, p0, f, ignore);
}

template <typename Token>
void by_mask(const NextTokenSource& s, std::size_t count, std::int32_t p0, const NextTokenFields& f,
             std::int64_t ignore) noexcept {
  const auto* t = reinterpret_cast<const Token*>(s.tokens);
  const bool want_weights = f.weights != nullptr;
  if (s.mask == nullptr) return by_fields(t, NoMask{}, want_weights, count, p0, f, ignore);
  if (s.mask_dtype == MaskDtype::float32) {
    return by_fields(t, FloatMask{reinterpret_cast<const float*>(s.mask) + 1}, want_weights, count, p0, f, ignore);
  }
  // A byte mask is turned into float weights first, and the run then reads those: a loop
  // mixing byte loads with int64 stores does not vectorise on x86-64's baseline.
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(s.mask) + 1;
  if (want_weights) {
    float* __restrict w = f.weights;
    for (std::size_t i = 0; i < count; ++i) w[i] = bytes[i] != 0 ? 1.0f : 0.0f;
    NextTokenFields rest = f;
    rest.weights = nullptr;
    return by_fields(t, FloatMask{f.weights}, false, count, p0, rest, ignore);
  }
  struct ByteMask {
    const std::uint8_t* __restrict m;
    float at(std::size_t i) const noexcept { return m[i] != 0 ? 1.0f : 0.0f; }
  };
  by_fields(t, ByteMask{bytes}, false, count, p0, f, ignore);
}

}  // namespace

void write_next_token_run(const NextTokenSource& source, std::size_t count, std::int32_t first_position,
                          const NextTokenFields& fields, std::int64_t ignore_index) noexcept {
  if (count == 0) return;
  if (source.token_dtype == TokenDtype::uint16) {
    by_mask<std::uint16_t>(source, count, first_position, fields, ignore_index);
  } else {
    by_mask<std::uint32_t>(source, count, first_position, fields, ignore_index);
  }
}

}  // namespace tokenfeed
