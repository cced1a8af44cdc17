// The split rule of prepare_chat_dataset (tokenfeed/prepare.hpp, the public entry point), for
// the loader's tests and the preparation itself.
#pragma once

#include <cstdint>

#include "chat/conversation_jsonl.hpp"
#include "tokenfeed/prepare.hpp"

namespace tokenfeed {

// The split rule: SHA-256 over "tokenfeed-split-v1\0", the seed (8 bytes little-endian), then
// for each message its role, a 0 byte, its content length (8 bytes little-endian) and content
// bytes (for ids: the count, then each id as 4 bytes little-endian). The first 8 digest bytes,
// big-endian, shifted right by 11 and scaled by 2^-53, give u in [0, 1); val when u < val_split.
double split_point(const ParsedConversation& conversation, std::uint64_t seed);
inline bool split_is_val(const ParsedConversation& conversation, std::uint64_t seed, double val_split) {
  return split_point(conversation, seed) < val_split;
}

}  // namespace tokenfeed
