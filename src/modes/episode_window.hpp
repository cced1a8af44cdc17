// EpisodeWindows: which tokens of an episode a row keeps, under the configured truncation
// rule, and reading them (with their mask) from the memory-mapped split.
//
// A kept episode is at most S = block_size + 1 tokens: the whole episode when it fits;
// otherwise its first S tokens (Truncation::right) or the chat template's turn-aware
// window (Truncation::drop_oldest_turns: plan_sft_window from chat_format.hpp, which finds
// turns from the role and end-of-turn ids only). A window is a head range followed by a
// tail range of the episode's own positions. With Truncation::split the sampled ids are
// piece numbers (DocumentPieces) and a row keeps one piece: `kept` resolves either. Under
// a sequence-length curriculum they are rows' first-token numbers (Numbering::tokens), and
// the row keeps S tokens from that token: the windows of the row's length resolve it.
//
// Thread-safety: immutable after construction; const members may be called concurrently.
#pragma once

#include <cstdint>
#include <optional>

#include "dataset/episode_dataset.hpp"
#include "modes/next_token_run.hpp"
#include "sampling/document_pieces.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

class EpisodeWindows {
 public:
  // REQUIRES: split outlives this. Throws Error(config) for drop_oldest_turns without
  // special token ids.
  EpisodeWindows(const EpisodeSplit& split, std::size_t S, Truncation truncation,
                 std::optional<SpecialTokenIds> special);

  // The episode's data (EpisodeSplit::data): found once per row, for the calls below.
  EpisodeData data(std::uint64_t episode) const noexcept { return split_.data(episode); }

  SftWindow window(const EpisodeData& episode) const;
  SftWindow window(std::uint64_t episode) const { return window(data(episode)); }

  // What a row reads for sampled id `id`: with `pieces` null, episode `id` and its window;
  // else piece number `id`: its episode and the piece's tokens as the window.
  struct Kept {
    std::uint64_t episode = 0;
    EpisodeData data;
    SftWindow window;
  };
  // In an int32 split (a Megatron file's documents), a negative token in the kept window
  // is Error(format) naming the file and the token's offset.
  Kept kept(std::uint64_t id, const DocumentPieces* pieces) const;
  // The episode of sampled id `id` (as kept() resolves it).
  static std::uint64_t episode_of(std::uint64_t id, const DocumentPieces* pieces) noexcept {
    return pieces != nullptr ? pieces->piece(id).episode : id;
  }
  // Tokens / mask of the kept sequence, positions [first, first + count) of it.
  // REQUIRES: first + count <= window.size(); read_mask needs split.has_mask().
  void read_tokens(const EpisodeData& episode, const SftWindow& window, std::size_t first, std::size_t count,
                   std::int64_t* out) const noexcept;
  void read_mask(std::uint64_t episode, const SftWindow& window, std::size_t first, std::size_t count,
                 float* out) const noexcept;

  // Writes kept positions [0, count) of `fields` in one pass per contiguous run (see
  // write_next_token_run): inputs, targets (the next kept token), weights from the mask
  // when `with_mask` (else 1), labels and positions 0, 1, ... REQUIRES: count < window.size();
  // with_mask needs split.has_mask().
  void write_targets(const EpisodeData& episode, const SftWindow& window, std::size_t count, bool with_mask,
                     const NextTokenFields& fields, std::int64_t ignore_index) const noexcept {
    write_targets(episode, window, 0, count, with_mask, fields, ignore_index);
  }
  // The same for kept positions [first, first + count), written from `fields`' first
  // position on, with positions first, first + 1, ... (a context-parallel rank's chunk of
  // the sequence). REQUIRES: first + count < window.size().
  void write_targets(const EpisodeData& episode, const SftWindow& window, std::size_t first, std::size_t count,
                     bool with_mask, const NextTokenFields& fields, std::int64_t ignore_index) const noexcept;

  // Hints the CPU to start loading the episode's tokens (and mask), as a row reads them
  // (the hardware prefetcher follows a stream only after its first misses). Not a
  // page-cache read-ahead (see EpisodeSplit::prefetch_episode).
  void prefetch_start(std::uint64_t episode, bool with_mask) const noexcept;
  // The same for every line write_targets(episode, window, first, count) reads: a chunk
  // of a sequence is too short for the hardware prefetcher to follow (a context-parallel
  // rank's share reads two per sequence).
  void prefetch_range(const EpisodeData& episode, const SftWindow& window, std::size_t first, std::size_t count,
                      bool with_mask) const noexcept;

  std::size_t S() const noexcept { return S_; }
  Truncation truncation() const noexcept { return truncation_; }

 private:
  void check_signed(const Kept& k) const;  // kept()'s int32 check
  // The tokens (and mask) of an episode from its own position `offset` on.
  NextTokenSource source(const EpisodeData& episode, std::size_t offset, bool with_mask) const noexcept;
  // One token, one mask value (0 or 1 from a uint8 mask) of an episode's own position.
  std::int64_t token_at(const EpisodeData& episode, std::size_t position) const noexcept;
  float mask_at(const EpisodeData& episode, std::size_t position) const noexcept;

  const EpisodeSplit& split_;
  std::size_t S_;
  Truncation truncation_;
  std::optional<SpecialTokenIds> special_;
};

}  // namespace tokenfeed
