#include "tokenfeed/dtype.hpp"

namespace tokenfeed {

const char* to_string(TokenDtype t) noexcept {
  switch (t) {
    case TokenDtype::uint16:
      return "uint16";
    case TokenDtype::uint32:
      return "uint32";
    case TokenDtype::int32:
      return "int32";
  }
  return "uint32";
}
const char* to_string(MaskDtype m) noexcept { return m == MaskDtype::uint8 ? "uint8" : "float32"; }

std::optional<TokenDtype> parse_token_dtype(std::string_view name) noexcept {
  if (name == "uint16") return TokenDtype::uint16;
  if (name == "uint32") return TokenDtype::uint32;
  return std::nullopt;
}

std::optional<MaskDtype> parse_mask_dtype(std::string_view name) noexcept {
  if (name == "uint8") return MaskDtype::uint8;
  if (name == "float32") return MaskDtype::float32;
  return std::nullopt;
}

}  // namespace tokenfeed
