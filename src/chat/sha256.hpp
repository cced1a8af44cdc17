// Sha256: the SHA-256 digest (FIPS 180-4), incremental. Used to fingerprint input files and
// tokenizer models, and to assign conversations to splits reproducibly (any SHA-256
// implementation, e.g. Python's hashlib, gives the same assignment).
//
// Thread-safety: one object per thread; distinct objects are independent.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace tokenfeed {

class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;

  Sha256() noexcept;
  void update(const void* data, std::size_t size) noexcept;
  void update(std::string_view bytes) noexcept { update(bytes.data(), bytes.size()); }
  // Finishes and returns the digest; the object must not be updated afterwards.
  Digest finish() noexcept;

  static std::string hex(const Digest& digest);

 private:
  void compress(const std::uint8_t* block) noexcept;

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
};

// Hex SHA-256 of a file's bytes. Throws Error(io) when it cannot be read.
std::string sha256_file_hex(const std::filesystem::path& path);

}  // namespace tokenfeed
