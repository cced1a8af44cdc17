// Tokenizer: text <-> token ids, with the chat template's special tokens as single ids.
//
// Three kinds are built in (make_tokenizer):
//   "bytes"                the UTF-8 bytes of the text as ids 0..255; the special tokens are
//                          appended after them (256 system, 257 user, 258 assistant, 259 tool,
//                          260 eot with the default order); needs no model file.
//   "sentencepiece:MODEL"  a SentencePiece model file. A special token the model defines as a
//                          piece (user-defined or control symbol) takes that piece's id; the
//                          others are appended after the model's vocabulary, in the order
//                          system, user, assistant, tool, eot.
//   "hf-bpe:TOKENIZER_JSON" a Hugging Face byte-level BPE tokenizer.json (or a directory
//                          holding one), encoded natively with the ids of the `tokenizers`
//                          package's encode(text, add_special_tokens=False): its added tokens
//                          are matched in the text as that package matches them. A special
//                          token whose string is an added token's takes its id; the others are
//                          appended after the file's ids. The model's end and beginning of
//                          sequence are tokenizer_config.json's eos_token and bos_token when
//                          that file is beside it. A file using a feature the native
//                          encoder cannot reproduce exactly is refused, the feature named
//                          (src/tokenizer/hf_bpe_spec.hpp lists what is supported).
//
// encode() never returns an appended special id (text cannot produce one). A SentencePiece
// model that defines a special token as a user-defined symbol does turn that literal string
// in the text into its id; the chat serializer rejects such content (no marker text is ever
// interpreted as a turn boundary).
//
// Thread-safety: immutable after construction; all const members may be called concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenfeed/export.hpp"
#include "tokenfeed/special_tokens.hpp"

namespace tokenfeed {

// The text of each special token, defaulting to the spec's names.
struct SpecialTokenStrings {
  std::string system = "<|ngpt_sys_84a5023f67d74cf29cc4001becde983c|>";
  std::string user = "<|ngpt_usr_84a5023f67d74cf29cc4001becde983c|>";
  std::string assistant = "<|ngpt_asst_84a5023f67d74cf29cc4001becde983c|>";
  std::string tool = "<|ngpt_tool_84a5023f67d74cf29cc4001becde983c|>";
  std::string eot = "<|ngpt_eot_84a5023f67d74cf29cc4001becde983c|>";
};

// Special token strings from the JSON file `file` holding an object {"system": "...",
// "user": ..., "assistant": ..., "tool": ..., "eot": ...} (`tokenfeed prepare
// --special-token-strings`); missing keys keep their defaults. Throws Error(io) when the file
// cannot be read, Error(config) naming the file and key for an unknown key or a value that
// is not a string.
TOKENFEED_API SpecialTokenStrings read_special_token_strings(const std::filesystem::path& file);

// Where a special token's id comes from.
enum class SpecialTokenSource : std::uint8_t { appended, model };
TOKENFEED_API const char* to_string(SpecialTokenSource source) noexcept;  // "appended" | "model"

struct SpecialTokenInfo {
  std::string role;  // "system", "user", "assistant", "tool", "eot"
  std::string text;
  std::uint32_t id = 0;
  SpecialTokenSource source = SpecialTokenSource::appended;
};

// What a tokenizer is, for recording beside a dataset (tokenizer_state.json).
struct TokenizerDescription {
  std::string kind;                              // "bytes" | "sentencepiece" | "hf-bpe"
  std::filesystem::path model_path;              // empty for bytes
  std::string model_sha256;                      // hex; empty for bytes
  std::uint32_t base_vocab_size = 0;             // ids before any appended special token
  std::uint32_t vocab_size = 0;                  // including appended special tokens
  std::vector<SpecialTokenInfo> special_tokens;  // system, user, assistant, tool, eot
};

class TOKENFEED_API Tokenizer {
 public:
  virtual ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Appends the ids of `text` to `out`. Throws Error(format) when the text cannot be encoded
  // (SentencePiece rejects it).
  void encode(std::string_view text, std::vector<std::uint32_t>& out) const { do_encode(text, out); }
  std::vector<std::uint32_t> encode(std::string_view text) const;

  // The text of `ids`; special ids decode to their strings. Throws Error(format) for an id
  // >= vocab_size(). Byte-level ids that do not form valid UTF-8 are returned as they are.
  std::string decode(std::span<const std::uint32_t> ids) const { return do_decode(ids); }

  // Number of ids, special tokens included: every id is below it.
  std::uint32_t vocab_size() const noexcept { return vocab_size_; }
  const SpecialTokenIds& special_ids() const noexcept { return special_ids_; }  // tool always set
  const SpecialTokenStrings& special_strings() const noexcept { return special_strings_; }

  // The id of `token` as one whole token: a special token's string, or (SentencePiece) a
  // piece of the model; nullopt when the vocabulary has no such token.
  std::optional<std::uint32_t> token_id(std::string_view token) const;
  // The end- and beginning-of-sequence ids the model itself defines (SentencePiece's eos and
  // bos pieces; hf-bpe: tokenizer_config.json's eos_token and bos_token), nullopt when it
  // defines none (the default). bytes: the end is the eot id, no beginning.
  virtual std::optional<std::uint32_t> model_eos_id() const noexcept;
  virtual std::optional<std::uint32_t> model_bos_id() const noexcept;

  virtual TokenizerDescription describe() const = 0;

 protected:
  Tokenizer(SpecialTokenStrings strings, SpecialTokenIds ids, std::uint32_t vocab_size);
  virtual void do_encode(std::string_view text, std::vector<std::uint32_t>& out) const = 0;
  virtual std::string do_decode(std::span<const std::uint32_t> ids) const = 0;
  // The id of a model piece whose text is `piece`; the default has none.
  virtual std::optional<std::uint32_t> do_piece_id(std::string_view piece) const;

  // The string of a special id, or nullptr when `id` is not one.
  const std::string* special_string(std::uint32_t id) const noexcept;
  // The five special tokens (system, user, assistant, tool, eot) with their sources.
  std::vector<SpecialTokenInfo> special_token_infos(const std::array<SpecialTokenSource, 5>& sources) const;

 private:
  SpecialTokenStrings special_strings_;
  SpecialTokenIds special_ids_;
  std::uint32_t vocab_size_;
};

// The "bytes" tokenizer. Throws Error(config) when two special strings are equal or empty.
TOKENFEED_API std::unique_ptr<Tokenizer> make_bytes_tokenizer(const SpecialTokenStrings& strings = {});

// The "sentencepiece:MODEL" tokenizer. Throws Error(io) when the model cannot be read or
// loaded, Error(config) when special strings are equal or empty.
TOKENFEED_API std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::filesystem::path& model,
                                                                      const SpecialTokenStrings& strings = {});

// The "hf-bpe:TOKENIZER_JSON" tokenizer: `tokenizer_json` is the file or a directory holding
// tokenizer.json. Throws Error(io) when it cannot be read, Error(format) when it is not a
// valid tokenizer.json or the text to encode is not valid UTF-8, Error(config) naming the
// feature when the native encoder does not support the file, or special strings are equal
// or empty.
TOKENFEED_API std::unique_ptr<Tokenizer> make_hf_bpe_tokenizer(const std::filesystem::path& tokenizer_json,
                                                               const SpecialTokenStrings& strings = {});

// Why the native encoder refuses `tokenizer_json` (the feature named), empty when it supports
// it. Throws the io and format errors of make_hf_bpe_tokenizer.
TOKENFEED_API std::string hf_bpe_unsupported(const std::filesystem::path& tokenizer_json);

// From a `--tokenizer` value: "bytes", "sentencepiece:MODEL" or "hf-bpe:TOKENIZER_JSON". Throws Error(config) for
// anything else, plus the errors of the factories above.
TOKENFEED_API std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec, const SpecialTokenStrings& strings = {});

}  // namespace tokenfeed
