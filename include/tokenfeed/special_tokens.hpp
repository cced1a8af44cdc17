// tokenfeed::SpecialTokenIds: the chat template's special token ids (role tokens and
// end-of-turn), shared by the template (chat_format.hpp), the tokenizers (tokenizer.hpp)
// and a dataset's metadata, which records them for turn-aware truncation.
//
// Thread-safety: a plain value type; the functions are pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "tokenfeed/export.hpp"

namespace tokenfeed {

// The template's special token ids. Each is a single id of the tokenizer's vocabulary.
// `tool` is absent for vocabularies without a tool role token (datasets prepared elsewhere,
// pre-tokenized input without one): conversations with tool turns are then rejected.
// The ids must be pairwise distinct (see check_special_token_ids).
struct SpecialTokenIds {
  std::uint32_t system = 0, user = 0, assistant = 0, eot = 0;
  std::optional<std::uint32_t> tool;
};

// Throws Error(config) naming `what` when two of the ids are equal.
TOKENFEED_API void check_special_token_ids(const SpecialTokenIds& ids, std::string_view what);

// True when `id` is one of the role tokens (system, user, assistant, tool).
TOKENFEED_API bool is_role_token(const SpecialTokenIds& ids, std::uint32_t id) noexcept;
// True when `id` is a role token or end-of-turn.
TOKENFEED_API bool is_special_token(const SpecialTokenIds& ids, std::uint32_t id) noexcept;

}  // namespace tokenfeed
