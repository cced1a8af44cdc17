#include "modes/next_token_run.hpp"

#include <algorithm>
#include <atomic>
#include <vector>

#define TOKENFEED_INLINE inline __attribute__((always_inline))
// Kernels for x86-64's AVX2 and AVX-512 levels beside the baseline (GCC's target
// attribute); the sanitizer builds keep the baseline only, which is all they test.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define TOKENFEED_ROW_KERNEL_X86 1
#else
#define TOKENFEED_ROW_KERNEL_X86 0
#endif

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
TOKENFEED_INLINE void run(const Token* __restrict t, Mask mask, std::size_t count, std::int32_t first_position,
                          std::int64_t* __restrict x, std::int64_t* __restrict y, float* __restrict weights,
                          std::int64_t* __restrict labels, std::int32_t* __restrict positions,
                          std::int64_t ignore_index) noexcept {
  for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<std::int64_t>(t[i]);
  if constexpr (kY) {
    for (std::size_t i = 0; i < count; ++i) y[i] = static_cast<std::int64_t>(t[i + 1]);
  }
  if constexpr (kWeights) {
    for (std::size_t i = 0; i < count; ++i) weights[i] = mask.at(i);
  }
  if constexpr (kContract) {
    for (std::size_t i = 0; i < count; ++i) {
      // Branch-free select (all ones where the target is trained), which vectorises where
      // a conditional of mixed widths does not.
      const std::int64_t trained = -static_cast<std::int64_t>(mask.at(i) != 0.0f);
      labels[i] = (static_cast<std::int64_t>(t[i + 1]) & trained) | (ignore_index & ~trained);
    }
    for (std::size_t i = 0; i < count; ++i) positions[i] = first_position + static_cast<std::int32_t>(i);
  }
}

template <typename Token, typename Mask, bool kY, bool kWeights>
TOKENFEED_INLINE void by_contract(const Token* t, Mask mask, std::size_t count, std::int32_t p0,
                                  const NextTokenFields& f, std::int64_t ignore) noexcept {
  if (f.labels != nullptr) {
    run<Token, Mask, kY, kWeights, true>(t, mask, count, p0, f.x, f.y, f.weights, f.labels, f.positions, ignore);
  } else {
    run<Token, Mask, kY, kWeights, false>(t, mask, count, p0, f.x, f.y, f.weights, f.labels, f.positions, ignore);
  }
}

// kWeights: write f.weights from the mask (false when they hold it already, or are not wanted).
template <typename Token, typename Mask>
TOKENFEED_INLINE void by_fields(const Token* t, Mask mask, bool write_weights, std::size_t count, std::int32_t p0,
                                const NextTokenFields& f, std::int64_t ignore) noexcept {
  if (f.y != nullptr) {
    if (write_weights) return by_contract<Token, Mask, true, true>(t, mask, count, p0, f, ignore);
    return by_contract<Token, Mask, true, false>(t, mask, count, p0, f, ignore);
  }
  if (write_weights) return by_contract<Token, Mask, false, true>(t, mask, count, p0, f, ignore);
  return by_contract<Token, Mask, false, false>(t, mask, count, p0, f, ignore);
}

template <typename Token>
TOKENFEED_INLINE void by_mask(const NextTokenSource& s, std::size_t count, std::int32_t p0, const NextTokenFields& f,
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

TOKENFEED_INLINE void next_token_run(const NextTokenSource& source, std::size_t count, std::int32_t first_position,
                                     const NextTokenFields& fields, std::int64_t ignore_index) noexcept {
  if (count == 0) return;
  if (source.token_dtype == TokenDtype::uint16) {
    by_mask<std::uint16_t>(source, count, first_position, fields, ignore_index);
  } else {
    by_mask<std::uint32_t>(source, count, first_position, fields, ignore_index);
  }
}

template <bool kY, bool kWeights, bool kContract>
TOKENFEED_INLINE void pad(std::size_t count, std::int64_t* __restrict x, std::int64_t* __restrict y,
                          float* __restrict weights, std::int64_t* __restrict labels,
                          std::int32_t* __restrict positions, std::int64_t pad_id, std::int64_t ignore_index,
                          std::int32_t first_position) noexcept {
  for (std::size_t i = 0; i < count; ++i) x[i] = pad_id;
  if constexpr (kY) {
    for (std::size_t i = 0; i < count; ++i) y[i] = pad_id;
  }
  if constexpr (kWeights) {
    for (std::size_t i = 0; i < count; ++i) weights[i] = 0.0f;
  }
  if constexpr (kContract) {
    for (std::size_t i = 0; i < count; ++i) labels[i] = ignore_index;
    for (std::size_t i = 0; i < count; ++i) positions[i] = first_position + static_cast<std::int32_t>(i);
  }
}

template <bool kY, bool kWeights>
TOKENFEED_INLINE void pad_by_contract(std::size_t count, const NextTokenFields& f, std::int64_t pad_id,
                                      std::int64_t ignore, std::int32_t p0) noexcept {
  if (f.labels != nullptr)
    return pad<kY, kWeights, true>(count, f.x, f.y, f.weights, f.labels, f.positions, pad_id, ignore, p0);
  pad<kY, kWeights, false>(count, f.x, f.y, f.weights, f.labels, f.positions, pad_id, ignore, p0);
}

TOKENFEED_INLINE void padding_run(std::size_t count, const NextTokenFields& fields, std::int64_t pad_id,
                                  std::int64_t ignore_index, std::int32_t p0) noexcept {
  if (count == 0) return;
  const bool y = fields.y != nullptr, w = fields.weights != nullptr;
  if (y && w) return pad_by_contract<true, true>(count, fields, pad_id, ignore_index, p0);
  if (y) return pad_by_contract<true, false>(count, fields, pad_id, ignore_index, p0);
  if (w) return pad_by_contract<false, true>(count, fields, pad_id, ignore_index, p0);
  pad_by_contract<false, false>(count, fields, pad_id, ignore_index, p0);
}

// The kernels compiled for one instruction set: the inline bodies above are inlined into
// each and vectorised for its target.
#define TOKENFEED_ROW_KERNELS(NAME, TARGET)                                                                        \
  TARGET void next_token_run_##NAME(const NextTokenSource& source, std::size_t count, std::int32_t first_position, \
                                    const NextTokenFields& fields, std::int64_t ignore_index) noexcept {           \
    next_token_run(source, count, first_position, fields, ignore_index);                                           \
  }                                                                                                                \
  TARGET void padding_run_##NAME(std::size_t count, const NextTokenFields& fields, std::int64_t pad_id,            \
                                 std::int64_t ignore_index, std::int32_t first_position) noexcept {                \
    padding_run(count, fields, pad_id, ignore_index, first_position);                                              \
  }

TOKENFEED_ROW_KERNELS(baseline, )
#if TOKENFEED_ROW_KERNEL_X86
TOKENFEED_ROW_KERNELS(x86_64_v3, __attribute__((target("arch=x86-64-v3"))))
TOKENFEED_ROW_KERNELS(x86_64_v4, __attribute__((target("arch=x86-64-v4,prefer-vector-width=512"))))
#endif

struct Kernels {
  RowKernelIsa isa;
  void (*next)(const NextTokenSource&, std::size_t, std::int32_t, const NextTokenFields&, std::int64_t) noexcept;
  void (*padding)(std::size_t, const NextTokenFields&, std::int64_t, std::int64_t, std::int32_t) noexcept;
};

constexpr Kernels kernels_for(RowKernelIsa isa) noexcept {
  switch (isa) {
#if TOKENFEED_ROW_KERNEL_X86
    case RowKernelIsa::x86_64_v4:
      return {isa, next_token_run_x86_64_v4, padding_run_x86_64_v4};
    case RowKernelIsa::x86_64_v3:
      return {isa, next_token_run_x86_64_v3, padding_run_x86_64_v3};
#endif
    default:
      return {RowKernelIsa::baseline, next_token_run_baseline, padding_run_baseline};
  }
}

RowKernelIsa best_isa() noexcept {
  const std::vector<RowKernelIsa> isas = row_kernel_isas();
  return isas.back();
}

// The kernels in use: the best at load; use_row_kernel_isa() may change them.
std::atomic<const Kernels*> g_kernels{nullptr};

const Kernels& kernels() noexcept {
  const Kernels* k = g_kernels.load(std::memory_order_acquire);
  if (k != nullptr) return *k;
  static const Kernels best = kernels_for(best_isa());
  g_kernels.store(&best, std::memory_order_release);
  return best;
}

}  // namespace

std::vector<RowKernelIsa> row_kernel_isas() {
  std::vector<RowKernelIsa> isas{RowKernelIsa::baseline};
#if TOKENFEED_ROW_KERNEL_X86
  __builtin_cpu_init();
  const bool v3 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  if (v3) isas.push_back(RowKernelIsa::x86_64_v3);
  if (v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    isas.push_back(RowKernelIsa::x86_64_v4);
  }
#endif
  return isas;
}

RowKernelIsa row_kernel_isa() noexcept { return kernels().isa; }

void use_row_kernel_isa(RowKernelIsa isa) noexcept {
  static const Kernels table[] = {kernels_for(RowKernelIsa::baseline), kernels_for(RowKernelIsa::x86_64_v3),
                                  kernels_for(RowKernelIsa::x86_64_v4)};
  g_kernels.store(&table[static_cast<int>(isa)], std::memory_order_release);
}

const char* to_string(RowKernelIsa isa) noexcept {
  switch (isa) {
    case RowKernelIsa::x86_64_v3:
      return "x86-64-v3";
    case RowKernelIsa::x86_64_v4:
      return "x86-64-v4";
    default:
      return "baseline";
  }
}

void prefetch_next_token_run(const NextTokenSource& source, std::size_t count) noexcept {
  // The first lines only: the hardware prefetcher follows the stream once it has seen it
  // start, and hinting a whole row measured no faster (perf/bench_compare, tokenfeed
  // bench) while it costs the current row an instruction per line.
  constexpr std::size_t kLine = 64, kLines = 4;
  const auto hint = [](const std::byte* p, std::size_t bytes) {
    for (std::size_t b = 0; b < std::min(bytes, kLines * kLine); b += kLine) __builtin_prefetch(p + b);
  };
  hint(source.tokens, (count + 1) * size_of(source.token_dtype));
  if (source.mask != nullptr) hint(source.mask, (count + 1) * size_of(source.mask_dtype));
}

void write_next_token_run(const NextTokenSource& source, std::size_t count, std::int32_t first_position,
                          const NextTokenFields& fields, std::int64_t ignore_index) noexcept {
  kernels().next(source, count, first_position, fields, ignore_index);
}

void write_padding_run(std::size_t count, const NextTokenFields& fields, std::int64_t pad_id, std::int64_t ignore_index,
                       std::int32_t first_position) noexcept {
  kernels().padding(count, fields, pad_id, ignore_index, first_position);
}

}  // namespace tokenfeed
