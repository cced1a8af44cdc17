// The "bytes" tokenizer: UTF-8 bytes as ids 0..255, special tokens 256..260.
#include <array>
#include <string>

#include "tokenizer/special_strings.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed {

namespace {

constexpr std::uint32_t kByteCount = 256;

SpecialTokenIds bytes_special_ids() {
  SpecialTokenIds ids;
  ids.system = kByteCount;
  ids.user = kByteCount + 1;
  ids.assistant = kByteCount + 2;
  ids.tool = kByteCount + 3;
  ids.eot = kByteCount + 4;
  return ids;
}

class BytesTokenizer final : public Tokenizer {
 public:
  explicit BytesTokenizer(const SpecialTokenStrings& strings)
      : Tokenizer(strings, bytes_special_ids(), kByteCount + 5) {}

  TokenizerDescription describe() const override {
    TokenizerDescription d;
    d.kind = "bytes";
    d.base_vocab_size = kByteCount;
    d.vocab_size = vocab_size();
    d.special_tokens =
        special_token_infos({SpecialTokenSource::appended, SpecialTokenSource::appended, SpecialTokenSource::appended,
                             SpecialTokenSource::appended, SpecialTokenSource::appended});
    return d;
  }

  std::optional<std::uint32_t> model_eos_id() const noexcept override { return special_ids().eot; }
  std::optional<std::uint32_t> model_bos_id() const noexcept override { return std::nullopt; }

 protected:
  void do_encode(std::string_view text, std::vector<std::uint32_t>& out) const override {
    out.reserve(out.size() + text.size());
    for (const char c : text) out.push_back(static_cast<unsigned char>(c));
  }

  std::string do_decode(std::span<const std::uint32_t> ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (const std::uint32_t id : ids) {
      if (id < kByteCount) {
        text.push_back(static_cast<char>(static_cast<unsigned char>(id)));
      } else if (const std::string* special = special_string(id)) {
        text += *special;
      } else {
        throw_undecodable_id("bytes tokenizer", id, vocab_size());
      }
    }
    return text;
  }
};

}  // namespace

std::unique_ptr<Tokenizer> make_bytes_tokenizer(const SpecialTokenStrings& strings) {
  check_special_token_strings(strings, "bytes tokenizer");
  return std::make_unique<BytesTokenizer>(strings);
}

}  // namespace tokenfeed
