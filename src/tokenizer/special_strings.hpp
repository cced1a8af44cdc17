// Validation shared by the tokenizers' constructors.
#pragma once

#include <string_view>

#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed {

// Throws Error(config) naming `what` when a special token string is empty or two are equal.
void check_special_token_strings(const SpecialTokenStrings& strings, std::string_view what);

}  // namespace tokenfeed
