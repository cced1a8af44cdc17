// Validation and errors shared by the tokenizers.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed {

// Throws Error(config) naming `what` when a special token string is empty or two are equal.
void check_special_token_strings(const SpecialTokenStrings& strings, std::string_view what);

// A decode's id that is neither a token of the tokenizer `what` nor a special token: throws
// Error(format) naming it and the vocabulary size.
[[noreturn]] void throw_undecodable_id(std::string_view what, std::uint32_t id, std::uint32_t vocab_size);

struct ResolvedSpecials {
  SpecialTokenIds ids;
  std::array<SpecialTokenSource, 5> sources{};  // system, user, assistant, tool, eot
  std::uint32_t vocab_size = 0;
};

// Each special token's id, in the order system, user, assistant, tool, eot: the model's
// (`model_id` of its string, when it answers one), else the next id from `base` on.
ResolvedSpecials resolve_specials(const SpecialTokenStrings& strings, std::uint32_t base,
                                  const std::function<std::optional<std::uint32_t>(const std::string&)>& model_id);

}  // namespace tokenfeed
