#include "util/sha256.hpp"

#include <openssl/err.h>
#include <openssl/evp.h>

#include <fstream>
#include <vector>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

// OpenSSL's most recent error as text, for messages (the queue is per thread).
std::string openssl_error() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "no details from OpenSSL";
  char text[256];
  ERR_error_string_n(code, text, sizeof text);
  return text;
}

// SHA-256, fetched from the default provider once per process: an implicit fetch on every
// EVP_DigestInit_ex would repeat the provider lookup for each conversation's split hash.
// Never freed, so that it outlives every Sha256 (OpenSSL releases its own state at exit).
const EVP_MD* sha256_md() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  if (md == nullptr) throw Error(ErrorKind::pipeline, "OpenSSL provides no SHA-256: " + openssl_error());
  return md;
}

}  // namespace

void Sha256::FreeContext::operator()(evp_md_ctx_st* ctx) const noexcept { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_) throw Error(ErrorKind::pipeline, "OpenSSL cannot allocate a digest context: " + openssl_error());
  if (EVP_DigestInit_ex(ctx_.get(), sha256_md(), nullptr) != 1) {
    throw Error(ErrorKind::pipeline, "OpenSSL cannot start a SHA-256 digest: " + openssl_error());
  }
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, std::size_t size) {
  if (size == 0) return;
  if (EVP_DigestUpdate(ctx_.get(), data, size) != 1) {
    throw Error(ErrorKind::pipeline, "OpenSSL SHA-256 update failed: " + openssl_error());
  }
}

void Sha256::restart_from(const Sha256& prefix) {
  if (EVP_MD_CTX_copy_ex(ctx_.get(), prefix.ctx_.get()) != 1) {
    throw Error(ErrorKind::pipeline, "OpenSSL cannot copy a SHA-256 digest state: " + openssl_error());
  }
}

Sha256::Digest Sha256::finish() {
  Digest digest{};
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_.get(), digest.data(), &length) != 1 || length != digest.size()) {
    throw Error(ErrorKind::pipeline, "OpenSSL SHA-256 finish failed: " + openssl_error());
  }
  return digest;
}

std::string Sha256::hex(const Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (const std::uint8_t byte : digest) {
    out.push_back(kDigits[byte >> 4]);
    out.push_back(kDigits[byte & 0xf]);
  }
  return out;
}

std::string sha256_file_hex(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::io, "cannot open '" + path.string() + "' for reading");
  Sha256 sha;
  std::vector<char> buffer(1 << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const std::streamsize got = in.gcount();
    if (got > 0) sha.update(buffer.data(), static_cast<std::size_t>(got));
  }
  if (in.bad()) throw Error(ErrorKind::io, "error while reading '" + path.string() + "'");
  return Sha256::hex(sha.finish());
}

}  // namespace tokenfeed
