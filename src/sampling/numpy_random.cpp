#include "sampling/numpy_random.hpp"

#include <algorithm>
#include <array>
#include <numeric>
#include <random>

#include "util/hash.hpp"

namespace tokenfeed {
namespace {

__extension__ using Uint128 = unsigned __int128;  // GCC/Clang extension: 64x64 -> 128 multiply

// numpy's random_interval(max): a uniform integer in [0, max] by masked rejection.
std::uint64_t random_interval(std::mt19937& mt, std::uint64_t max) {
  if (max == 0) return 0;
  std::uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  std::uint64_t value = 0;
  if (max <= 0xffffffffULL) {
    while ((value = (static_cast<std::uint64_t>(mt()) & mask)) > max) {
    }
  } else {
    while (true) {
      const std::uint64_t hi = mt();
      const std::uint64_t lo = mt();
      value = ((hi << 32) | lo) & mask;
      if (value <= max) break;
    }
  }
  return value;
}

// The permutation in a vector of integers. REQUIRES: n - 1 fits them.
//
// numpy's Fisher-Yates: for i from n-1 down to 1, swap order[i] with order[j], j drawn in
// [0, i]. The draws depend on the generator alone, never on the array, so they are made a
// block ahead and the entries they will swap are prefetched: over an array far larger than
// the caches (100M entries), the swaps then stop waiting on memory one at a time.
template <typename Vector>
Vector permutation(std::uint32_t seed, std::uint64_t n) {
  using T = typename Vector::value_type;
  Vector order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), T{0});
  std::mt19937 mt(seed);
  constexpr std::uint64_t kAhead = 64;
  std::array<std::uint64_t, kAhead> draws{};
  for (std::uint64_t top = n; top > 1;) {  // entries [top, n) are final
    const std::uint64_t block = std::min(kAhead, top - 1);
    for (std::uint64_t k = 0; k < block; ++k) {
      draws[k] = random_interval(mt, top - 1 - k);
      __builtin_prefetch(order.data() + draws[k], 1);
    }
    for (std::uint64_t k = 0; k < block; ++k) {
      std::swap(order[static_cast<std::size_t>(top - 1 - k)], order[static_cast<std::size_t>(draws[k])]);
    }
    top -= block;
  }
  return order;
}

}  // namespace

std::vector<std::uint64_t> numpy_permutation(std::uint32_t seed, std::uint64_t n) {
  return permutation<std::vector<std::uint64_t>>(seed, n);
}

IdList numpy_permutation_ids(std::uint32_t seed, std::uint64_t n) {
  if (n <= (std::uint64_t{1} << 32)) return IdList(permutation<IdVector<std::uint32_t>>(seed, n));
  return IdList(permutation<IdVector<std::uint64_t>>(seed, n));
}

std::uint64_t CounterRng::uniform(std::uint64_t counter, std::uint64_t bound) const noexcept {
  const std::uint64_t base = Hasher::mix(key_ ^ Hasher::mix(counter));
  const std::uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  for (std::uint64_t attempt = 0;; ++attempt) {
    const std::uint64_t x = Hasher::mix(base + attempt * 0x9e3779b97f4a7c15ULL);
    const Uint128 product = static_cast<Uint128>(x) * bound;
    if (static_cast<std::uint64_t>(product) >= threshold) return static_cast<std::uint64_t>(product >> 64);
  }
}

}  // namespace tokenfeed
