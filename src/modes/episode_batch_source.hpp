// EpisodeBatchSource: the sft_episode mode's batches: the sampler's plan, materialized
// into a slot with one whole episode per row.
//
// The padding rule, per row, for an episode whose kept sequence t (see EpisodeWindows)
// has length n <= L = block_size + 1: right-pad t to L with pad_token_id,
// x = t[0:block_size], y = t[1:L]; the mask aligned to y is mask[1:L] with 0 on padding.
// Fill rows are x = y = pad, mask 0, id -1. The batch contract's fields follow: labels = y
// where there is a loss (not padding, mask non-zero), else ignore_index; one sequence of
// n - 1 positions per row, then the row's padding. With truncation=split the sampled ids
// are piece numbers (DocumentPieces) and each row is one piece: t is the piece's tokens,
// the row's id its episode's. Under a sequence-length schedule each batch has its own
// block_size (the slot's cols) and a row keeps its episode's window at that length; with
// truncation=split the ids then number rows by their first token (DocumentPieces::
// Numbering::tokens) and a row holds block_size + 1 tokens of its document from there.
//
// Thread-safety: decode() may run concurrently on different slots.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/batch_pool.hpp"
#include "pipeline/batch_source.hpp"
#include "dataset/episode_dataset.hpp"
#include "modes/epoch_orders.hpp"
#include "modes/sampled_row_source.hpp"
#include "modes/episode_window.hpp"

namespace tokenfeed {

class EpisodeBatchSource final : public SampledRowSource {
 public:
  struct Options {
    std::int64_t pad_token_id = 0;
    std::size_t block_size = 0;
    bool with_mask = false;
    std::int64_t ignore_index = -100;
    // Fill labels, token_weights, position_ids and cu_seqlens; the slot's mask is then a
    // view of its token_weights (they agree in this mode). Must match the pool's shape.
    bool contract_fields = true;
    // Whether the trainer reads y, and any of labels, position_ids and cu_seqlens
    // (Config::fields): what it does not read is left unwritten.
    bool write_y = true;
    bool write_contract = true;
  };

  // REQUIRES: split, orders (and its sampler) and windows outlive the source.
  // `windows`: the windows at options.block_size (S = block_size + 1); under a
  // sequence-length schedule, also those of every other stage length (`stage_windows`),
  // each batch's found by its cols.
  EpisodeBatchSource(const EpisodeSplit& split, const EpochOrders& orders, const EpisodeWindows& windows,
                     Options options, std::vector<const EpisodeWindows*> stage_windows = {});

  void check_intact() const override { split_.check_intact(); }
  // Reads ahead the first block_size + 1 tokens (and mask) of the row's episode.
  void will_need_id(std::int64_t id) const noexcept override;
  // With truncation=split drawn at random under a mixture's sequence-length schedule, the
  // pieces at the row's length; else the sampler's ids.
  std::uint64_t ids_at_length(std::size_t cols) const noexcept override { return sampler_.ids_at_block_size(cols); }
  void prefetch_id(std::int64_t id) const noexcept override;
  void prefetch_record_id(std::int64_t id) const noexcept override {
    if (id >= 0) split_.prefetch_record(episode_of(id));
  }

 private:
  const EpisodeSplit& split_;
  std::vector<const EpisodeWindows*> windows_;  // [0]: options_.block_size's
  Options options_;
  std::size_t longest_ = 0;  // the longest kept sequence of any batch (will_need's reach)

  // The windows of a batch of `cols` positions per row. REQUIRES: one of windows_ has
  // S() == cols + 1 (the schedule's stages, settled at open).
  const EpisodeWindows& windows_for(std::size_t cols) const noexcept;

  void decode_id(std::int64_t id, detail::BatchSlot& slot, std::size_t r) const override;
  // The episode of sampled id `id` >= 0 (a piece number with truncation=split).
  std::uint64_t episode_of(std::int64_t id) const noexcept {
    return EpisodeWindows::episode_of(static_cast<std::uint64_t>(id), sampler_.pieces());
  }
};

// Completes one row's contract fields after its first `real` input positions were filled
// (tokens, labels, weights): padding gets pad, ignore_index and weight 0; positions restart
// at 0 for the padding; the padding becomes a sequence of its own. Shared by the SFT modes.
void finish_row_padding(detail::BatchSlot& slot, std::size_t row, std::size_t cols, std::size_t real,
                        std::int64_t pad_token_id, std::int64_t ignore_index) noexcept;

}  // namespace tokenfeed
