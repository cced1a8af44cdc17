// Element types of the on-disk token and mask files.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "tokenfeed/export.hpp"

namespace tokenfeed {

// int32 is read only where a file names it (a Megatron-LM index's dtype code 4, which
// Megatron writes for vocabularies of 65500 ids and more): its bits are read as uint32 and a
// negative id is refused where a batch reads it; nothing writes it, and parse_token_dtype
// does not accept it (the dtypes a config or dataset_metadata.json gives are uint16 and
// uint32).
enum class TokenDtype { uint16, uint32, int32 };
enum class MaskDtype { uint8, float32 };

constexpr std::size_t size_of(TokenDtype t) noexcept { return t == TokenDtype::uint16 ? 2 : 4; }
constexpr std::size_t size_of(MaskDtype m) noexcept { return m == MaskDtype::uint8 ? 1 : 4; }

TOKENFEED_API const char* to_string(TokenDtype t) noexcept;  // "uint16" | "uint32" | "int32"
TOKENFEED_API const char* to_string(MaskDtype m) noexcept;   // "uint8" | "float32"

// Parse the names above (of TokenDtype: uint16 and uint32); std::nullopt for anything else.
TOKENFEED_API std::optional<TokenDtype> parse_token_dtype(std::string_view name) noexcept;
TOKENFEED_API std::optional<MaskDtype> parse_mask_dtype(std::string_view name) noexcept;

}  // namespace tokenfeed
