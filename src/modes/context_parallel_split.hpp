// The context-parallel split of whole rows, for any mode: a CP rank's share of a batch
// decoded whole (docs/batch-contract.md, "Context parallelism").
//
// The split is the load-balanced one of TransformerEngine's THD attention (its
// thd_get_partitioned_indices, and get_batch_on_this_cp_rank in
// transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, whose
// pad_thd_sequences_for_cp and generate_positional_ids_for_cp pad as the loader does) and
// Megatron's get_batch_on_this_cp_rank: a sequence's padded span of n positions (n a multiple of
// 2·cp) is cut into 2·cp chunks of n / (2·cp), and CP rank r keeps chunks r and
// 2·cp - 1 - r, in that order. A row's share is its sequences' shares one after another,
// so it is block_size / cp long. The sequences are those of cu_seqlens_padded, or with
// `by_sequences` false the whole row (sft_episode and a plain token_stream: the format of
// a row without cu_seqlens, Megatron's BSHD).
//
// sft_packed writes its share straight from the episodes (PackedBatchSource), never
// decoding the whole rows; ContextParallelSplitSource gives every other source (sft_episode,
// token_stream, a mixture) the split, at the cost of decoding the whole rows into a scratch
// slot and copying the share.
//
// Thread-safety: split_for_context_parallel is a pure function of its arguments;
// ContextParallelSplitSource's decode may run concurrently (the scratch slots are taken
// under a mutex), the rest as its inner source's.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "pipeline/batch_pool.hpp"
#include "pipeline/batch_source.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed {

// Which share a process takes.
struct ContextParallelShare {
  std::size_t size = 1;      // cp
  std::size_t rank = 0;      // in [0, cp)
  bool by_sequences = true;  // cut each sequence of cu_seqlens_padded; false: each whole row
};

// Writes `share`'s part of every row of `whole` (rows of `whole_cols` positions, every
// field decoded) into `out` (rows of whole_cols / share.size), each field `out` has, and
// copies the bookkeeping, which describes the whole rows: the batch's position, real rows
// and positions, the ids, cu_seqlens, cu_seqlens_padded, max_seqlen and the segments.
// REQUIRES: out's buffers are those of whole's shape with cols / share.size (and the
// whole rows' sequence capacity); every sequence's padded length (every row, when not by
// sequences) a multiple of 2·share.size.
void split_for_context_parallel(const detail::BatchSlot& whole, std::size_t whole_cols,
                                const ContextParallelShare& share, detail::BatchSlot& out);

// A BatchSource whose batches are `share`'s part of another source's: it plans as the
// other does, decodes each batch whole into a scratch slot of `whole_shape`, and splits it.
class ContextParallelSplitSource final : public BatchSource {
 public:
  // REQUIRES: whole_shape has no deferred fields (the scratch slots are written whole);
  // `whole` outlives this (the second form owns it).
  ContextParallelSplitSource(BatchSource& whole, const detail::BatchShape& whole_shape, ContextParallelShare share);
  ContextParallelSplitSource(std::unique_ptr<BatchSource> whole, const detail::BatchShape& whole_shape,
                             ContextParallelShare share);

  BatchPlan plan(std::uint64_t step) override { return whole_.plan(step); }
  void decode(const BatchPlan& plan, detail::BatchSlot& slot) const override;
  void will_need(const BatchPlan& plan) const noexcept override { whole_.will_need(plan); }
  void check_intact() const override { whole_.check_intact(); }
  std::uint64_t batches_in_epoch(std::uint64_t epoch) const override { return whole_.batches_in_epoch(epoch); }
  std::uint64_t samples_in_epoch(std::uint64_t epoch) const override { return whole_.samples_in_epoch(epoch); }
  void seek(const SplitPosition& at) override { whole_.seek(at); }

 private:
  std::unique_ptr<BatchSource> owned_;  // null when `whole_` is owned elsewhere
  BatchSource& whole_;
  detail::BatchShape whole_shape_;
  ContextParallelShare share_;

  // Scratch slots not in use, one per concurrent decode at most.
  mutable Mutex mutex_;
  mutable std::vector<std::unique_ptr<detail::BatchSlot>> spare_ TF_GUARDED_BY(mutex_);
};

}  // namespace tokenfeed
