// The split rule of prepare_text_corpus (tokenfeed/prepare_text.hpp, the public entry
// point), for its tests and the preparation itself.
#pragma once

#include <cstdint>
#include <string_view>

#include "tokenfeed/prepare_text.hpp"

namespace tokenfeed {

// The split rule: SHA-256 over "tokenfeed-text-split-v1\0", the seed (8 bytes little-endian)
// and the document's bytes; the first 8 digest bytes, big-endian, shifted right by 11 and
// scaled by 2^-53, give u in [0, 1); val when u < val_split.
double text_split_point(std::string_view text, std::uint64_t seed);

// The same digest's split point, and the verify sample's draw: digest bytes 8..15, read as the
// split point's are; the document is re-encoded by the verifier when it is < verify_fraction.
// Two draws from one hash, so that which documents are verified is independent of which go to
// val, at no second hash's cost.
struct TextDraws {
  double split = 0;
  double verify = 0;
};
TextDraws text_draws(std::string_view text, std::uint64_t seed);

}  // namespace tokenfeed
