// Products of counts that must not wrap: a global batch (batch_size x world_size), rows per
// step times a step, a window count times its size. A wrapped product is a wrong position
// read silently, or a division by zero; each is refused where it is formed, with an error
// naming the keys it comes from.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tokenfeed/error.hpp"

namespace tokenfeed {

// a * b, or Error(config): "<what> = a x b overflows 64 bits" (`what` names the keys,
// e.g. "batch_size x world_size").
inline std::uint64_t checked_product(std::uint64_t a, std::uint64_t b, std::string_view what) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    throw Error(ErrorKind::config, std::string(what) + " = " + std::to_string(a) + " x " + std::to_string(b) +
                                       " overflows 64 bits; lower them");
  }
  return product;
}

// a + b, or Error(config) as checked_product.
inline std::uint64_t checked_sum(std::uint64_t a, std::uint64_t b, std::string_view what) {
  std::uint64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) {
    throw Error(ErrorKind::config, std::string(what) + " = " + std::to_string(a) + " + " + std::to_string(b) +
                                       " overflows 64 bits; lower them");
  }
  return sum;
}

}  // namespace tokenfeed
