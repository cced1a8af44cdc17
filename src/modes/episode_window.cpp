#include "modes/episode_window.hpp"

#include <algorithm>

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

SftWindow EpisodeWindows::window(std::uint64_t episode) const {
  const EpisodeSpan span = split_.spans()[episode];
  SftWindow w;
  if (span.length <= S_ || truncation_ == Truncation::right) {
    w.head_end = static_cast<std::size_t>(std::min<std::uint64_t>(span.length, S_));
    return w;
  }
  const EpisodeShard& shard = split_.shards()[split_.shard_of(episode)];
  const std::byte* base = shard.tokens.bytes().data();
  const auto n = static_cast<std::size_t>(span.length);
  if (split_.token_dtype() == TokenDtype::uint16) {
    const auto* tokens = reinterpret_cast<const std::uint16_t*>(base) + span.start;
    return plan_sft_window(std::span<const std::uint16_t>(tokens, n), S_, *special_);
  }
  const auto* tokens = reinterpret_cast<const std::uint32_t*>(base) + span.start;
  return plan_sft_window(std::span<const std::uint32_t>(tokens, n), S_, *special_);
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

void EpisodeWindows::read_tokens(std::uint64_t episode, const SftWindow& window, std::size_t first, std::size_t count,
                                 std::int64_t* out) const noexcept {
  for_kept_range(window, first, count, [&](std::size_t offset, std::size_t n, std::size_t at) {
    split_.read_tokens(episode, offset, n, out + at);
  });
}

void EpisodeWindows::read_mask(std::uint64_t episode, const SftWindow& window, std::size_t first, std::size_t count,
                               float* out) const noexcept {
  for_kept_range(window, first, count, [&](std::size_t offset, std::size_t n, std::size_t at) {
    split_.read_mask(episode, offset, n, out + at);
  });
}

}  // namespace tokenfeed
