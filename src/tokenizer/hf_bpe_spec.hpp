// What the native encoder reads from a Hugging Face tokenizer.json, and the refusal of
// anything else: a file with a feature outside this list is never encoded natively, so an
// id can never silently differ from what the `tokenizers` package gives.
//
// Supported: model BPE (merges as "a b" strings or [a, b] pairs, ignore_merges; no dropout,
// no byte_fallback, no unk_token use, no subword prefix or suffix); pre-tokenizer ByteLevel
// (add_prefix_space, use_regex) or a Sequence of Split (Regex or String pattern, every
// behavior, invert) ending with ByteLevel; normalizer none, NFC or a Sequence of NFC; added
// tokens with every flag; no truncation or padding; post-processor none, ByteLevel,
// TemplateProcessing or a Sequence of those (none changes the ids of
// encode(add_special_tokens=False)); decoder ByteLevel or none; ids within kMaxIdGap of the
// number of tokens listed.
//
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tokenfeed {

enum class SplitBehavior : std::uint8_t { removed, isolated, merged_with_previous, merged_with_next, contiguous };

struct PreTokenizerStep {
  enum class Kind : std::uint8_t { split, prefix_space } kind = Kind::split;
  std::string pattern;   // split: the pattern
  bool literal = false;  // split: a String pattern, not a regex
  SplitBehavior behavior = SplitBehavior::isolated;
  bool invert = false;
};

struct HfAddedToken {
  std::uint32_t id = 0;
  std::string content;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

struct HfBpeSpec {
  bool nfc = false;
  std::vector<PreTokenizerStep> steps;                       // applied in order; the last byte-maps each piece
  std::vector<std::pair<std::string, std::uint32_t>> vocab;  // the model's tokens as written
  std::vector<std::pair<std::string, std::string>> merges;   // as written (byte-level text)
  bool ignore_merges = false;
  std::vector<HfAddedToken> added_tokens;
};

// GPT-2's pre-tokenizer pattern, which ByteLevel(use_regex=true) applies.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Ids may leave gaps, but no id may lie more than this beyond the number of tokens the file
// lists (the vocabulary's and the added tokens'): such a file is refused as unsupported.
inline constexpr std::uint64_t kMaxIdGap = std::uint64_t{1} << 20;

// Reads the JSON text of a tokenizer.json. Throws Error(format) naming `what` for invalid JSON
// or a malformed member, and Error(config) "... is not supported by the native encoder"
// naming the feature (its JSON path and value) for anything outside the list above.
HfBpeSpec read_hf_bpe_spec(std::string_view json_text, const std::string& what);

}  // namespace tokenfeed
