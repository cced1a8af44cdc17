// Sha256: the SHA-256 digest (FIPS 180-4), incremental, computed by OpenSSL's libcrypto
// (EVP interface). Used to fingerprint input files and tokenizer models, and to assign
// conversations to splits reproducibly (any SHA-256 implementation, e.g. Python's hashlib,
// gives the same assignment).
//
// Thread-safety: one object per thread; distinct objects are independent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX, kept out of this header (libcrypto is private)

namespace tokenfeed {

class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;

  // Throws Error(pipeline) when libcrypto cannot provide SHA-256 (no memory, no provider).
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;

  void update(const void* data, std::size_t size);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }
  // Finishes and returns the digest; the object must not be updated afterwards.
  Digest finish();
  // Makes this digest continue from `prefix`'s state (what it has been given so far), as
  // if given the same bytes: one context reused for many digests of a common prefix.
  void restart_from(const Sha256& prefix);

  static std::string hex(const Digest& digest);

 private:
  struct FreeContext {
    void operator()(evp_md_ctx_st* ctx) const noexcept;
  };
  std::unique_ptr<evp_md_ctx_st, FreeContext> ctx_;
};

// Hex SHA-256 of a file's bytes. Throws Error(io) when it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace tokenfeed
