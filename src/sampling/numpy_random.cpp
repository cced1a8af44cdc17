#include "sampling/numpy_random.hpp"

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

}  // namespace

std::vector<std::uint64_t> numpy_permutation(std::uint32_t seed, std::uint64_t n) {
  std::vector<std::uint64_t> order(n);
  std::iota(order.begin(), order.end(), std::uint64_t{0});
  std::mt19937 mt(seed);
  for (std::uint64_t i = n; i-- > 1;) {
    const std::uint64_t j = random_interval(mt, i);
    std::swap(order[i], order[j]);
  }
  return order;
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
