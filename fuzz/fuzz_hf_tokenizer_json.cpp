// A Hugging Face tokenizer.json as the native byte-level BPE reads it (make_tokenizer
// "hf-bpe:FILE": hf_bpe_spec's reading and refusal, the merges and vocabulary built into
// ByteLevelBpe, the pre-tokenizer patterns compiled by PCRE2), then an encode and a decode.
// The input is the file, optionally followed by kTextMark and a text to encode (a fixed hard
// text otherwise). A tokenizer, or an Error (a refusal names the feature), and nothing else,
// is the acceptable outcome: no crash, no sanitizer report, no other exception.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace {

constexpr std::string_view kTextMark = "\n#TEXT#\n";

// Contractions, digits, every white space kind, combining marks, a ZWJ emoji, Hangul, CJK,
// RTL, and the added-token strings the seeds define, side by side.
constexpr std::string_view kHardText =
    "It'S 12345 x\t\r\n\xc2\xa0\xe3\x80\x80  e\xcc\x81 \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9 "
    "\xed\x95\x9c\xea\xb5\xad \xe6\x97\xa5\xe6\x9c\xac \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d \xef\xbf\xbd"
    "<|endoftext|><|im_start|>user[WORD] <L> x <R>  <LR>caf\xc3\xa9!";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenfeed;
  const std::vector<std::string_view> parts = fuzz::split_parts(data, size, kTextMark, 2);
  const auto path = fuzz::scratch_dir() / "tokenizer.json";
  fuzz::write_file(path, parts[0]);
  const std::string_view text = parts[1].empty() ? kHardText : parts[1];
  try {
    (void)hf_bpe_unsupported(path);
  } catch (const Error&) {
  }
  try {
    const auto tokenizer = make_tokenizer("hf-bpe:" + path.string());
    const std::vector<std::uint32_t> ids = tokenizer->encode(text);
    for (const std::uint32_t id : ids) {
      if (id >= tokenizer->vocab_size()) __builtin_trap();  // an id outside the vocabulary
    }
    (void)tokenizer->decode(ids);
  } catch (const Error&) {
  }
  return 0;
}
