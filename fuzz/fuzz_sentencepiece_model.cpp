// A SentencePiece model file: tokenfeed's own piece-type reader on the bytes, and the whole
// tokenizer load (SentencePiece's parser and trie builders behind call_third_party) from a
// scratch file, then an encode/decode round of a short text.
#include <cstddef>
#include <cstdint>

#include "tokenizer/sentencepiece_model.hpp"
#include "fuzz_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tokenfeed;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  try {
    (void)read_sentencepiece_piece_types(bytes, "fuzz.model");
  } catch (const Error&) {
  }
  const auto path = fuzz::scratch_dir() / "fuzz.model";
  fuzz::write_file(path, bytes);
  try {
    const auto tokenizer = make_tokenizer("sentencepiece:" + path.string());
    const std::vector<std::uint32_t> ids = tokenizer->encode("hello world <|user|> 123");
    (void)tokenizer->decode(ids);
  } catch (const Error&) {
  }
  return 0;
}
