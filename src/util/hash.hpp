// Hasher: a fast, stable 64-bit hash for fingerprints (not cryptographic).
//
// Stable across runs, builds and platforms of the same endianness: fingerprints are
// written into resume states and compared on restore.
#pragma once

#include <cstdint>
#include <string_view>

namespace tokenfeed {

class Hasher {
 public:
  void add(std::uint64_t word) noexcept { state_ = mix(state_ ^ mix(word + 0x9e3779b97f4a7c15ULL)); }
  void add(std::string_view text) noexcept {
    add(text.size());
    std::uint64_t word = 0;
    int filled = 0;
    for (const char c : text) {
      word |= static_cast<std::uint64_t>(static_cast<unsigned char>(c)) << (8 * filled);
      if (++filled == 8) {
        add(word);
        word = 0;
        filled = 0;
      }
    }
    if (filled > 0) add(word);
  }
  std::uint64_t digest() const noexcept { return mix(state_); }

  // The splitmix64 finalizer: a bijective mix with good avalanche.
  static constexpr std::uint64_t mix(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  std::uint64_t state_ = 0x243f6a8885a308d3ULL;
};

}  // namespace tokenfeed
