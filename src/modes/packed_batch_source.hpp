// PackedBatchSource: the sft_packed mode's batches: several whole episodes per row.
//
// Each epoch's episode order (the same numpy-compatible order as sft_episode) is packed
// into rows by pack_episodes; global batch j of the epoch is rows [j*B*W, (j+1)*B*W) and
// rank r takes the r-th slice of B rows (epoch_drop_last applies to the global batch;
// without it the last batch is completed with fill rows). An episode t kept to length
// n <= block_size + 1 contributes inputs t[0:n-1] and labels t[1:n] to its row, positions
// restarting at 0, weights = its mask shifted the same way (1 with the mask off); the rest
// of a row is padding (pad, ignore_index, weight 0), a sequence of its own.
//
// Epochs differ in batch count, so the position in the stream is (epoch, batch in epoch),
// advanced by the serial planning stage; batch j of an epoch is still a pure function of
// the epoch, whatever came before.
//
// Thread-safety: plan() walks the epochs with a cursor that seek() sets; the two may be
// called from different threads (guarded by a mutex). decode() and the const members may
// run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "pipeline/batch_source.hpp"
#include "sampling/episode_packer.hpp"
#include "modes/episode_window.hpp"
#include "modes/epoch_orders.hpp"
#include "pipeline/recent_cache.hpp"

namespace tokenfeed {

class PackedBatchSource final : public BatchSource {
 public:
  struct Options {
    std::size_t block_size = 0;
    std::uint64_t batch_size = 1;  // rows per rank
    std::uint64_t world_size = 1;
    std::uint64_t rank = 0;
    bool drop_last = true;
    std::size_t lookahead = 64;
    std::int64_t pad_token_id = 0;
    std::int64_t ignore_index = -100;
    bool with_mask = false;
  };

  // `orders` gives each epoch's episode order (its sampler's batch settings are not used).
  // When epoch 0 packs into fewer rows than one global batch with drop_last,
  // batches_in_epoch(0) is 0 (the owner reports it). REQUIRES: split, windows and orders
  // outlive the source.
  PackedBatchSource(const EpisodeSplit& split, const EpisodeWindows& windows, const EpochOrders& orders,
                    Options options);

  // Plans `step`, which must follow the previous plan (or the seek); throws
  // Error(pipeline) otherwise.
  BatchPlan plan(std::uint64_t step) override;
  void decode(const BatchPlan& plan, detail::BatchSlot& slot) const override;
  void check_intact() const override { split_.check_intact(); }
  std::uint64_t batches_in_epoch(std::uint64_t epoch) const override;
  std::uint64_t samples_in_epoch(std::uint64_t epoch) const override;
  void seek(std::uint64_t step, std::uint64_t epoch, std::uint64_t batch_in_epoch) override;

  // The packing of an epoch (cached: the two most recent).
  std::shared_ptr<const PackedEpoch> packing(std::uint64_t epoch) const;

 private:
  const EpisodeSplit& split_;
  const EpisodeWindows& windows_;
  const EpochOrders& orders_;
  Options options_;
  std::vector<std::uint32_t> positions_of_;  // per global episode id: kept length - 1 (0: not kept)

  PackedEpoch make_packing(std::uint64_t epoch) const;

  // The epoch being consumed and the next one. Declared after what make_packing reads:
  // its destructor waits for a background make.
  RecentCache<PackedEpoch> packings_{2};

  std::mutex mutex_;
  std::uint64_t next_step_ = 0, next_epoch_ = 0, next_batch_ = 0;  // GUARDED_BY(mutex_)
};

}  // namespace tokenfeed
