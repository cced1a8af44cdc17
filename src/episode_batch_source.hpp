// EpisodeBatchSource: the sft_episode mode's batches: the sampler's plan, materialized
// into a slot with one whole episode per row.
//
// The padding rule, per row, for an episode t of length n and L = block_size + 1:
// take t[:L], right-pad to L with pad_token_id, x = t[0:block_size], y = t[1:L]; the mask
// aligned to y is mask[1:L] with 0 on padding. Fill rows are x = y = pad, mask 0, id -1.
//
// Thread-safety: decode() may run concurrently on different slots.
#pragma once

#include <cstdint>

#include "batch_pool.hpp"
#include "batch_source.hpp"
#include "episode_dataset.hpp"
#include "episode_sampler.hpp"

namespace tokenfeed {

class EpisodeBatchSource final : public BatchSource {
 public:
  // REQUIRES: split and sampler outlive the source.
  EpisodeBatchSource(const EpisodeSplit& split, const EpisodeSampler& sampler, std::int64_t pad_token_id,
                 std::size_t block_size, bool with_mask) noexcept
      : split_(split), sampler_(sampler), pad_(pad_token_id), block_size_(block_size), with_mask_(with_mask) {}

  BatchPlan plan(std::uint64_t step) const override { return sampler_.plan(step); }
  void decode(const BatchPlan& plan, detail::BatchSlot& slot) const override;

 private:
  const EpisodeSplit& split_;
  const EpisodeSampler& sampler_;
  std::int64_t pad_;
  std::size_t block_size_;
  bool with_mask_;
};

}  // namespace tokenfeed
