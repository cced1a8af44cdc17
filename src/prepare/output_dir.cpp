#include "prepare/output_dir.hpp"

#include <system_error>

#include "tokenfeed/error.hpp"

namespace tokenfeed {

namespace fs = std::filesystem;

fs::path normalized_output(const fs::path& p) {
  fs::path out = fs::absolute(p).lexically_normal();
  if (!out.has_filename()) out = out.parent_path();
  return out;
}

std::string recorded_path(const fs::path& p) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(p, ec);
  return ec ? fs::absolute(p).lexically_normal().string() : canonical.string();
}

void check_output_dir(const fs::path& out) {
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);
  if (!fs::exists(st)) return;
  if (!fs::is_directory(st)) {
    throw Error(ErrorKind::config, "output '" + out.string() + "' exists and is not a directory");
  }
  if (!fs::is_empty(out, ec) || ec) {
    throw Error(ErrorKind::config,
                "output directory '" + out.string() + "' already exists and is not empty; remove it or choose another");
  }
}

TokenDtype choose_token_dtype(std::optional<TokenDtype> asked, std::uint64_t vocab_size) {
  const TokenDtype fitting = vocab_size <= 65536 ? TokenDtype::uint16 : TokenDtype::uint32;
  if (!asked) return fitting;
  if (*asked == TokenDtype::uint16 && vocab_size > 65536) {
    throw Error(ErrorKind::config, "token dtype uint16 cannot hold a vocabulary of " + std::to_string(vocab_size) +
                                       " ids; use uint32 or auto");
  }
  return *asked;
}

}  // namespace tokenfeed
