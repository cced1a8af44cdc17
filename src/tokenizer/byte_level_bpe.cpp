#include "tokenizer/byte_level_bpe.hpp"

#include <atomic>
#include <limits>
#include <queue>

#include "tokenizer/unicode_text.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

constexpr std::uint64_t kEmpty = std::numeric_limits<std::uint64_t>::max();

// bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 to U+0100 on.
struct ByteMap {
  std::array<char32_t, 256> to_char{};
  std::array<int, 324> to_byte{};
  ByteMap() {
    to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      to_char[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
      to_byte[to_char[static_cast<std::size_t>(b)]] = b;
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

std::uint64_t mix(std::uint64_t key) noexcept {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return key;
}

// Pieces encoded recently by this thread, for the model `owner`: text repeats word by word.
struct PieceCache {
  std::uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<std::uint32_t>, StringViewHash, std::equal_to<>> entries;
};
constexpr std::size_t kCacheEntries = std::size_t{1} << 16;
constexpr std::size_t kCachedPieceBytes = 64;
constexpr std::size_t kShortPiece = 48;  // longer pieces merge through a heap

std::atomic<std::uint64_t> next_cache_owner{1};

}  // namespace

std::optional<std::string> byte_level_to_bytes(std::string_view mapped) {
  std::string bytes;
  bytes.reserve(mapped.size());
  const ByteMap& map = byte_map();
  std::size_t pos = 0;
  while (pos < mapped.size()) {
    const char32_t c = next_code_point(mapped, pos);
    if (c >= map.to_byte.size() || map.to_byte[c] < 0) return std::nullopt;
    bytes.push_back(static_cast<char>(map.to_byte[c]));
  }
  return bytes;
}

ByteLevelBpe::ByteLevelBpe(BytesToId byte_vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                           bool ignore_merges, const std::string& what)
    : byte_vocab_(std::move(byte_vocab)), ignore_merges_(ignore_merges), cache_owner_(next_cache_owner++) {
  for (int b = 0; b < 256; ++b) {
    const auto it = byte_vocab_.find(std::string_view(std::string(1, static_cast<char>(b))));
    if (it == byte_vocab_.end()) {
      throw Error(ErrorKind::config, what + ": byte " + std::to_string(b) +
                                         " has no token (a byte-level vocabulary without every byte is not supported)");
    }
    byte_ids_[static_cast<std::size_t>(b)] = it->second;
  }
  std::size_t slots = 16;
  while (slots < merges.size() * 2) slots *= 2;
  merge_keys_.assign(slots, kEmpty);
  merge_values_.resize(slots);
  merge_mask_ = slots - 1;
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto l = byte_vocab_.find(left);
    const auto r = byte_vocab_.find(right);
    const auto m = byte_vocab_.find(left + right);
    if (l == byte_vocab_.end() || r == byte_vocab_.end() || m == byte_vocab_.end()) {
      throw Error(ErrorKind::config, what + ": merge " + std::to_string(rank) + " names a token not in the vocabulary");
    }
    const std::uint64_t key = (std::uint64_t{l->second} << 32) | r->second;
    std::uint64_t slot = mix(key) & merge_mask_;
    while (merge_keys_[slot] != kEmpty && merge_keys_[slot] != key) slot = (slot + 1) & merge_mask_;
    if (merge_keys_[slot] == key) continue;  // a repeated pair keeps its first (lowest) rank
    merge_keys_[slot] = key;
    merge_values_[slot] = Merge{static_cast<std::uint32_t>(rank), m->second};
  }
}

const ByteLevelBpe::Merge* ByteLevelBpe::find_merge(std::uint32_t left, std::uint32_t right) const noexcept {
  const std::uint64_t key = (std::uint64_t{left} << 32) | right;
  std::uint64_t slot = mix(key) & merge_mask_;
  while (true) {
    const std::uint64_t k = merge_keys_[slot];
    if (k == key) return &merge_values_[slot];
    if (k == kEmpty) return nullptr;
    slot = (slot + 1) & merge_mask_;
  }
}

// Repeatedly merges the adjacent pair of lowest rank, the leftmost on a tie.
void ByteLevelBpe::merge_short(std::vector<std::uint32_t>& symbols) const {
  while (symbols.size() > 1) {
    std::uint32_t best_rank = std::numeric_limits<std::uint32_t>::max();
    std::size_t best = 0;
    std::uint32_t best_id = 0;
    for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
      const Merge* m = find_merge(symbols[i], symbols[i + 1]);
      if (m != nullptr && m->rank < best_rank) {
        best_rank = m->rank;
        best = i;
        best_id = m->id;
      }
    }
    if (best_rank == std::numeric_limits<std::uint32_t>::max()) return;
    symbols[best] = best_id;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

// The same order of merges in O(n log n): a heap of candidate pairs by (rank, position),
// a pair found stale when popped (a side merged since) skipped.
void ByteLevelBpe::merge_long(std::vector<std::uint32_t>& symbols) const {
  const std::size_t n = symbols.size();
  std::vector<std::size_t> prev(n);
  std::vector<std::size_t> next(n);
  std::vector<bool> alive(n, true);
  constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
  for (std::size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kNone : i - 1;
    next[i] = i + 1 == n ? kNone : i + 1;
  }
  struct Candidate {
    std::uint32_t rank;
    std::size_t pos;
    std::uint32_t id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](std::size_t pos) {
    if (pos == kNone || next[pos] == kNone) return;
    if (const Merge* m = find_merge(symbols[pos], symbols[next[pos]])) heap.push({m->rank, pos, m->id});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    if (!alive[top.pos] || next[top.pos] == kNone) continue;
    const Merge* m = find_merge(symbols[top.pos], symbols[next[top.pos]]);
    if (m == nullptr || m->id != top.id || m->rank != top.rank) continue;
    const std::size_t right = next[top.pos];
    symbols[top.pos] = top.id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] != kNone) prev[next[right]] = top.pos;
    push(prev[top.pos]);
    push(top.pos);
  }
  std::vector<std::uint32_t> merged;
  for (std::size_t i = 0; i != kNone; i = next[i]) merged.push_back(symbols[i]);
  symbols = std::move(merged);
}

void ByteLevelBpe::encode(std::string_view piece, std::vector<std::uint32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (ignore_merges_) {
    if (const auto it = byte_vocab_.find(piece); it != byte_vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  thread_local PieceCache cache;
  const bool cacheable = piece.size() <= kCachedPieceBytes;
  if (cacheable) {
    if (cache.owner != cache_owner_) {
      cache.entries.clear();
      cache.owner = cache_owner_;
    }
    if (const auto it = cache.entries.find(piece); it != cache.entries.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::uint32_t> symbols(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) symbols[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  if (symbols.size() <= kShortPiece) {
    merge_short(symbols);
  } else {
    merge_long(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    if (cache.entries.size() >= kCacheEntries) cache.entries.clear();
    cache.entries.emplace(std::string(piece), std::move(symbols));
  }
}

}  // namespace tokenfeed
