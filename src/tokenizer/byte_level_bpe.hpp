// The byte-level BPE model of a Hugging Face tokenizer.json (GPT-2's byte-to-character map,
// merges by rank), applied to the raw bytes of a pre-tokenized piece.
//
// Thread-safety: immutable after construction; encode may be called concurrently (each
// thread keeps its own cache of encoded pieces).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tokenfeed {

// GPT-2's bijection between bytes and printable code points (bytes_to_unicode): the
// vocabulary and merges of a byte-level tokenizer.json are written in these characters.
// The raw bytes of such a string, nullopt when a character is not one of the 256.
std::optional<std::string> byte_level_to_bytes(std::string_view mapped);

struct StringViewHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using BytesToId = std::unordered_map<std::string, std::uint32_t, StringViewHash, std::equal_to<>>;

class ByteLevelBpe {
 public:
  // `byte_vocab`: the vocabulary by raw bytes (the entries whose text is byte-level), which
  // must hold each of the 256 single bytes; `merges`: the pairs of raw byte strings by rank.
  // Throws Error(config) naming `what` when a byte is missing, or a merge's parts or result
  // are not in the vocabulary (as `tokenizers` refuses such a file).
  ByteLevelBpe(BytesToId byte_vocab, const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
               const std::string& what);

  // Appends the ids of `piece` (raw bytes, non-empty).
  void encode(std::string_view piece, std::vector<std::uint32_t>& out) const;

 private:
  struct Merge {
    std::uint32_t rank;
    std::uint32_t id;
  };
  const Merge* find_merge(std::uint32_t left, std::uint32_t right) const noexcept;
  void merge_short(std::vector<std::uint32_t>& symbols) const;
  void merge_long(std::vector<std::uint32_t>& symbols) const;

  BytesToId byte_vocab_;
  std::array<std::uint32_t, 256> byte_ids_{};
  bool ignore_merges_;
  // Open addressing over (left << 32 | right); an empty slot has key kEmpty.
  std::vector<std::uint64_t> merge_keys_;
  std::vector<Merge> merge_values_;
  std::uint64_t merge_mask_ = 0;
  std::uint64_t cache_owner_;  // this model's key in each thread's cache
};

}  // namespace tokenfeed
