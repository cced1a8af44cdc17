#include "modes/episode_window.hpp"

#include <algorithm>
#include <cstring>

#include "tokenfeed/error.hpp"

namespace tokenfeed {

EpisodeWindows::EpisodeWindows(const EpisodeSplit& split, std::size_t S, Truncation truncation,
                               std::optional<SpecialTokenIds> special)
    : split_(split), S_(S), truncation_(truncation), special_(special) {
  if (truncation == Truncation::drop_oldest_turns && !special_) {
    throw Error(ErrorKind::config,
                "truncation=drop_oldest_turns finds turns from the chat template's role and end-of-turn ids, but '" +
                    (split.dir().parent_path() / "dataset_metadata.json").string() +
                    "' has no special_tokens (tokenfeed prepare records them); use truncation=right");
  }
}

namespace {

// Calls read(episode_offset, count, out_offset) for the parts of kept positions
// [first, first + count) that fall in the head and in the tail.
template <typename Read>
void for_kept_range(const SftWindow& w, std::size_t first, std::size_t count, Read&& read) {
  const std::size_t head = w.head_end - w.head_begin;
  std::size_t done = 0;
  if (first < head) {
    const std::size_t n = std::min(count, head - first);
    read(w.head_begin + first, n, 0);
    done = n;
  }
  if (done < count) {
    const std::size_t tail_first = first + done - head;
    read(w.tail_begin + tail_first, count - done, done);
  }
}

}  // namespace

SftWindow EpisodeWindows::window(const EpisodeData& e) const {
  SftWindow w;
  if (e.length <= S_ || truncation_ != Truncation::drop_oldest_turns) {  // split: its first piece
    w.head_end = static_cast<std::size_t>(std::min<std::uint64_t>(e.length, S_));
    return w;
  }
  const auto n = static_cast<std::size_t>(e.length);
  if (split_.token_dtype() == TokenDtype::uint16) {
    return plan_sft_window(std::span<const std::uint16_t>(reinterpret_cast<const std::uint16_t*>(e.tokens), n), S_,
                           *special_);
  }
  return plan_sft_window(std::span<const std::uint32_t>(reinterpret_cast<const std::uint32_t*>(e.tokens), n), S_,
                         *special_);
}

EpisodeWindows::Kept EpisodeWindows::kept(std::uint64_t id, const DocumentPieces* pieces) const {
  Kept k;
  if (pieces == nullptr) {
    k.episode = id;
    k.data = data(id);
    k.window = window(k.data);
  } else {
    const DocumentPieces::Piece piece = pieces->piece(id);
    k.episode = piece.episode;
    k.data = data(piece.episode);
    k.window.head_begin = static_cast<std::size_t>(piece.first);
    k.window.head_end = static_cast<std::size_t>(std::min<std::uint64_t>(k.data.length, piece.first + S_));
  }
  if (split_.token_dtype() == TokenDtype::int32) check_signed(k);
  return k;
}

void EpisodeWindows::check_signed(const Kept& k) const {
  // An int32 token is read as its uint32 bits: a negative one is above INT32_MAX.
  const auto* tokens = reinterpret_cast<const std::uint32_t*>(k.data.tokens);
  std::size_t bad = SIZE_MAX;
  for_kept_range(k.window, 0, k.window.size(), [&](std::size_t offset, std::size_t n, std::size_t) {
    for (std::size_t i = 0; i < n && bad == SIZE_MAX; ++i) {
      if (tokens[offset + i] > static_cast<std::uint32_t>(INT32_MAX)) bad = offset + i;
    }
  });
  if (bad == SIZE_MAX) return;
  const EpisodeShard& shard = split_.shards()[split_.shard_of(k.episode)];
  const std::uint64_t offset = shard.span(k.episode - shard.first_episode).start + bad;
  throw Error(ErrorKind::format, "'" + shard.tokens.path().string() + "': token " + std::to_string(offset) +
                                     " (episode " + std::to_string(k.episode) + " position " + std::to_string(bad) +
                                     ") is " + std::to_string(static_cast<std::int32_t>(tokens[bad])) +
                                     ", a negative id in an int32 file (its .idx says int32; token ids are never "
                                     "negative)");
}

void EpisodeWindows::read_tokens(const EpisodeData& e, const SftWindow& window, std::size_t first, std::size_t count,
                                 std::int64_t* out) const noexcept {
  const bool narrow = split_.token_dtype() == TokenDtype::uint16;
  for_kept_range(window, first, count, [&](std::size_t offset, std::size_t n, std::size_t at) {
    if (narrow) {
      const auto* src = reinterpret_cast<const std::uint16_t*>(e.tokens) + offset;
      for (std::size_t i = 0; i < n; ++i) out[at + i] = src[i];
    } else {
      const auto* src = reinterpret_cast<const std::uint32_t*>(e.tokens) + offset;
      for (std::size_t i = 0; i < n; ++i) out[at + i] = src[i];
    }
  });
}

void EpisodeWindows::read_mask(std::uint64_t episode, const SftWindow& window, std::size_t first, std::size_t count,
                               float* out) const noexcept {
  for_kept_range(window, first, count, [&](std::size_t offset, std::size_t n, std::size_t at) {
    split_.read_mask(episode, offset, n, out + at);
  });
}

NextTokenSource EpisodeWindows::source(const EpisodeData& e, std::size_t offset, bool with_mask) const noexcept {
  NextTokenSource s;
  s.token_dtype = split_.token_dtype();
  s.tokens = e.tokens + offset * size_of(s.token_dtype);
  if (with_mask) {
    s.mask_dtype = *split_.mask_dtype();
    s.mask = e.mask + offset * size_of(s.mask_dtype);
  }
  return s;
}

std::int64_t EpisodeWindows::token_at(const EpisodeData& e, std::size_t position) const noexcept {
  if (split_.token_dtype() == TokenDtype::uint16) {
    std::uint16_t v = 0;
    std::memcpy(&v, e.tokens + 2 * position, 2);
    return v;
  }
  std::uint32_t v = 0;
  std::memcpy(&v, e.tokens + 4 * position, 4);
  return v;
}

float EpisodeWindows::mask_at(const EpisodeData& e, std::size_t position) const noexcept {
  if (*split_.mask_dtype() == MaskDtype::uint8)
    return std::to_integer<std::uint8_t>(e.mask[position]) != 0 ? 1.0f : 0.0f;
  float v = 0;
  std::memcpy(&v, e.mask + 4 * position, 4);
  return v;  // float masks are weights: kept as they are
}

void EpisodeWindows::prefetch_start(std::uint64_t episode, bool with_mask) const noexcept {
  const EpisodeData e = split_.data(episode);
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(e.length, S_));
  if (n > 0) prefetch_next_token_run(source(e, 0, with_mask), n - 1);
}

void EpisodeWindows::prefetch_range(const EpisodeData& e, const SftWindow& w, std::size_t first, std::size_t count,
                                    bool with_mask) const noexcept {
  if (count == 0) return;
  // Every cache line of [p, p + bytes).
  const auto hint = [](const std::byte* p, std::size_t bytes) {
    constexpr std::uintptr_t kLine = 64;
    const auto end = reinterpret_cast<std::uintptr_t>(p) + bytes;
    for (std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p) & ~(kLine - 1); a < end; a += kLine) {
      __builtin_prefetch(reinterpret_cast<const void*>(a));
    }
  };
  const std::size_t token_bytes = size_of(split_.token_dtype());
  const std::size_t mask_bytes = with_mask ? size_of(*split_.mask_dtype()) : 0;
  // Inputs [first, first + count) and their targets: kept positions up to first + count.
  for_kept_range(w, first, std::min(count + 1, w.size() - first), [&](std::size_t offset, std::size_t n, std::size_t) {
    hint(e.tokens + offset * token_bytes, n * token_bytes);
    if (mask_bytes != 0) hint(e.mask + offset * mask_bytes, n * mask_bytes);
  });
}

void EpisodeWindows::write_targets(const EpisodeData& e, const SftWindow& w, std::size_t first, std::size_t count,
                                   bool with_mask, const NextTokenFields& fields,
                                   std::int64_t ignore_index) const noexcept {
  // Kept position i is head position head_begin + i while i < head, then tail position
  // tail_begin + (i - head); the input at head - 1 is the head's last token and its
  // target the tail's first, which no contiguous run covers.
  const std::size_t head = w.head_end - w.head_begin;
  const std::size_t end = first + count;
  const auto at = [&fields, first](std::size_t i) {  // the fields from kept position i on
    const std::size_t d = i - first;
    NextTokenFields f;
    f.x = fields.x + d;
    if (fields.y != nullptr) f.y = fields.y + d;
    if (fields.weights != nullptr) f.weights = fields.weights + d;
    if (fields.labels != nullptr) f.labels = fields.labels + d;
    if (fields.positions != nullptr) f.positions = fields.positions + d;
    return f;
  };
  std::size_t i = first;
  if (head > 0 && i + 1 < head) {  // inputs whose targets are in the head
    const std::size_t n = std::min(end, head - 1) - i;
    write_next_token_run(source(e, w.head_begin + i, with_mask), n, static_cast<std::int32_t>(i), fields, ignore_index);
    i += n;
  }
  if (i >= end) return;
  if (head > 0 && i + 1 == head) {
    // The junction, one position: its input and its target through one-element reads.
    const std::int64_t input = token_at(e, w.head_end - 1);
    const std::int64_t target = token_at(e, w.tail_begin);
    const float weight = with_mask ? mask_at(e, w.tail_begin) : 1.0f;
    const NextTokenFields j = at(i);
    *j.x = input;
    if (j.y != nullptr) *j.y = target;
    if (j.weights != nullptr) *j.weights = weight;
    if (j.labels != nullptr) {
      *j.labels = weight != 0.0f ? target : ignore_index;
      *j.positions = static_cast<std::int32_t>(i);
    }
    ++i;
  }
  if (i >= end) return;
  write_next_token_run(source(e, w.tail_begin + (i - head), with_mask), end - i, static_cast<std::int32_t>(i), at(i),
                       ignore_index);
}

}  // namespace tokenfeed
