// BatchPool: the fixed set of batch buffers a split's pipeline cycles through.
//
// Buffers are allocated at construction, and later only when the pipeline's auto prefetch
// depth grows the pool (grow_to, up to the capacity fixed at construction); the steady
// state allocates nothing.
// A slot is acquired by a decode stage, travels through the pipeline to the ready ring,
// is handed to the trainer inside a Batch, and returns here when the Batch is released.
// The pool outlives its pipeline when the trainer still holds batches (shared_ptr).
//
// Thread-safety: acquire/release/set_release_listener are thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "tokenfeed/batch.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed::detail {

struct BatchSlot;

struct BatchShape {
  std::size_t rows = 0;
  std::size_t cols = 0;
  bool with_mask = false;              // the episode mode's mask (or, packed, weights as the mask)
  bool with_document_fields = false;   // doc_ids (document-aware token streams)
  bool y_is_labels = false;            // sft_packed and token_stream: y is a view of labels
  bool mask_is_weights = false;        // the mask is a view of token_weights (sft_packed;
                                       // sft_episode with the contract fields, where they agree)
  bool contract_fields = true;         // labels (unless y), token_weights, position_ids (unless
                                       // document fields), cu_seqlens; false leaves them empty
  bool packed = false;                 // sft_packed: segments are recorded
  bool rl_fields = false;              // RL batches: log_probs, rewards and group_ids
  bool with_source_ids = false;        // a mixture: each row's source index is recorded
  // Context parallelism (docs/batch-contract.md): sequences padded to a multiple of 2·cp
  // have a cu_seqlens_padded of their own; else it is a view of cu_seqlens (needs the
  // contract fields).
  bool padded_sequences = false;
  // With context_parallel_split, cp: the rows are this rank's share, cols = block_size / cp,
  // while cu_seqlens, cu_seqlens_padded and segments describe the whole rows of
  // cols * context_parallel positions. 1 otherwise.
  std::size_t context_parallel = 1;
  std::size_t full_cols() const noexcept { return cols * context_parallel; }
  // The fields the trainer chose (Config::fields): the decoders write them (a mode may
  // leave the others unwritten), and Batch hands out only them.
  BatchFields fields = kEveryBatchField;
  bool chose(BatchField field) const noexcept { return (fields & batch_field_bit(field)) != 0; }
};

struct BatchSlot {
  // Buffers, sized once.
  std::vector<std::int64_t> x, y, episode_ids;  // y is empty when it is a view of labels
  std::vector<float> mask;                       // empty when off or a view of token_weights
  std::vector<std::int32_t> doc_ids;             // empty unless document-aware
  std::vector<std::int32_t> source_ids;          // one per row; empty unless with_source_ids

  // The batch contract every mode fills (see include/tokenfeed/batch.hpp), unless the
  // shape leaves it out (contract_fields false): then these are empty.
  std::vector<std::int64_t> labels;
  std::vector<float> token_weights;
  std::vector<std::int32_t> position_ids;
  std::vector<std::int32_t> cu_seqlens;  // capacity rows * (full_cols + 1) + 1; num_sequences + 1 used
  // The sequences' offsets with their context-parallel padding (BatchShape::padded_sequences;
  // empty otherwise, where they equal cu_seqlens); cu_seqlens then holds the real lengths.
  std::vector<std::int32_t> cu_seqlens_padded;
  std::uint32_t num_sequences = 0;
  std::uint32_t max_seqlen = 0;
  std::uint64_t real_positions = 0;                // input positions that belong to an episode or window
  std::vector<tokenfeed::PackedSegment> segments;  // packed mode; capacity rows * full_cols, `segment_count` used
  std::size_t segment_count = 0;
  // RL batches only (empty otherwise): log_probs B x T, and per sequence of cu_seqlens its
  // reward and group id (capacity as cu_seqlens; num_sequences used).
  std::vector<float> log_probs;
  std::vector<float> rewards;
  std::vector<std::int64_t> group_ids;
  bool log_probs_given = false;  // some group of the batch gave log-probs

  // Starts filling the slot for a batch of `batch_rows` rows (the shape's, or fewer under a
  // batch-size schedule: the buffers' first rows x cols cells) of `batch_cols` positions
  // (0: the cols the slot has, the shape's unless a sequence-length schedule changed them):
  // its bookkeeping, and empty sequence and segment lists. Every decoder calls it first.
  void begin_batch(std::uint64_t batch_step, std::uint64_t batch_epoch, std::uint64_t index_in_epoch,
                   std::uint64_t rows_real, std::size_t batch_rows, std::size_t batch_cols = 0) noexcept {
    rows = batch_rows;
    if (batch_cols != 0) cols = batch_cols;
    if (rows * cols < resident_cells) {
      release_beyond(rows * cols);
    } else {
      resident_cells = rows * cols;
    }
    step = batch_step;
    epoch = batch_epoch;
    batch_in_epoch = index_in_epoch;
    real_rows = rows_real;
    real_positions = 0;
    segment_count = 0;
    begin_sequences();
  }

  // Starts the sequence list; then one add_sequence per sequence, in position order.
  // Both do nothing without the contract fields.
  void begin_sequences() noexcept {
    num_sequences = 0;
    max_seqlen = 0;
    if (!cu_seqlens.empty()) cu_seqlens[0] = 0;
    if (!cu_seqlens_padded.empty()) cu_seqlens_padded[0] = 0;
  }
  // A sequence of `length` positions, all real (or a row's padding).
  void add_sequence(std::size_t length) noexcept { add_sequence(length, length); }
  // A sequence of `real` positions padded to `padded` (context parallelism).
  void add_sequence(std::size_t real, std::size_t padded) noexcept {
    if (cu_seqlens.empty()) return;
    cu_seqlens[num_sequences + 1] = cu_seqlens[num_sequences] + static_cast<std::int32_t>(real);
    if (!cu_seqlens_padded.empty()) {
      cu_seqlens_padded[num_sequences + 1] = cu_seqlens_padded[num_sequences] + static_cast<std::int32_t>(padded);
    }
    ++num_sequences;
    max_seqlen = std::max(max_seqlen, static_cast<std::uint32_t>(real));
  }

  // Under a shape schedule a slot's batches use only their first rows x cols cells: when a
  // batch needs fewer cells than the slot has touched since its last release, the pages of
  // the per-position buffers beyond them are returned to the kernel (madvise DONTNEED; they
  // read as zero and fault back in when a larger batch writes them), so that resident memory
  // follows the shape in use rather than the largest. Best effort: a failed madvise keeps
  // the pages. Without a schedule every batch fills the slot and this never runs.
  void release_beyond(std::size_t cells) noexcept;
  std::size_t resident_cells = 0;  // the cells the slot's buffers may hold resident (make_slot: all)

  // Bookkeeping written by the decode stage.
  int decoder = -1;               // the decoder that last filled it (BatchPool::acquire)
  BatchSlot* run_next = nullptr;  // the next batch of its run through the pipeline's graph, if any
  std::uint64_t sequence = 0;  // position in the pipeline's output order (for the sequencer)
  std::uint64_t step = 0, epoch = 0, batch_in_epoch = 0;
  std::uint64_t real_rows = 0;
  std::size_t rows = 0;  // this batch's rows (begin_batch): at most the shape's
  // This batch's positions per row (begin_batch): the shape's cols, or fewer under a
  // sequence-length schedule (rows are rows x cols contiguous cells at the buffers' start).
  std::size_t cols = 0;
  // Packed mode: the epoch row the batch starts at, and where the next batch starts.
  std::uint64_t row_in_epoch = 0, next_epoch = 0, next_row_in_epoch = 0;
  // Packed mode with balance_ranks: the rows of the global batch this batch holds, and the
  // ranks' largest attention cost sliced and balanced, and their mean (for the audit log);
  // empty and 0 otherwise.
  std::vector<std::uint32_t> global_rows;
  std::uint64_t sliced_cost_max = 0, balanced_cost_max = 0;
  double cost_mean = 0;
  std::exception_ptr error;  // set when the stage that produced this slot failed
  double wait_us = 0;        // set by get_batch

  // The bytes of every buffer above (what one slot costs in memory).
  std::size_t buffer_bytes() const noexcept {
    return (x.capacity() + y.capacity() + episode_ids.capacity() + labels.capacity() + group_ids.capacity()) *
               sizeof(std::int64_t) +
           (mask.capacity() + token_weights.capacity() + log_probs.capacity() + rewards.capacity()) * sizeof(float) +
           (doc_ids.capacity() + position_ids.capacity() + cu_seqlens.capacity() + cu_seqlens_padded.capacity() +
            source_ids.capacity()) *
               sizeof(std::int32_t) +
           segments.capacity() * sizeof(PackedSegment);
  }

  // Release/acquire hand-off between the stages that write and read the slot, so that
  // the ordering is visible to ThreadSanitizer through our own atomics (the TBB runtime
  // that schedules the stages is not instrumented).
  std::atomic<std::uint64_t> handoff{0};
  void publish() noexcept { handoff.fetch_add(1, std::memory_order_release); }
  void observe() const noexcept { (void)handoff.load(std::memory_order_acquire); }
};

// One slot with every buffer `shape` calls for, outside any pool (a mode's scratch rows).
std::unique_ptr<BatchSlot> make_slot(const BatchShape& shape);

class BatchPool : public std::enable_shared_from_this<BatchPool> {
 public:
  // The bytes of one slot's buffers for `shape`, computed without allocating (saturated at
  // UINT64_MAX), so that a pool's size can be checked before it is built.
  static std::uint64_t bytes_per_slot(const BatchShape& shape) noexcept;

  // Allocates `slots` slots now; grow_to may add more, up to `capacity` (at least `slots`).
  BatchPool(std::size_t slots, BatchShape shape, std::string split, std::size_t capacity = 0);

  // Allocates slots until there are `slots` (clamped to capacity()). Thread-safe; the
  // pipeline calls it off the trainer's thread before it admits more batches.
  void grow_to(std::size_t slots);

  // A free slot, or nullptr when every slot is in use: the one released last, or with a
  // `decoder` (>= 0), the one released last of those that decoder filled before (any
  // other when there is none), and marks the slot as filled by it. A decoder thus keeps
  // rewriting the few slots whose memory its own core's cache holds, instead of writing
  // slots another core filled, whose every line must first be taken from that core's
  // cache.
  BatchSlot* acquire(int decoder = -1) noexcept;
  // Returns a slot to the free list (from a released Batch, or an error slot).
  void release(BatchSlot* slot) noexcept;

  // Wraps a slot the trainer now owns; counted in held() until the Batch is released.
  Batch make_batch(BatchSlot* slot);
  // Slots currently inside Batches the trainer has not released.
  std::size_t held() const noexcept { return held_.load(std::memory_order_acquire); }

  const BatchShape& shape() const noexcept { return shape_; }
  const std::string& split() const noexcept { return split_; }
  // Slots allocated so far, the most there may ever be, and the bytes of one slot.
  std::size_t size() const noexcept { return size_.load(std::memory_order_acquire); }
  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }

 private:
  BatchShape shape_;
  std::string split_;
  std::size_t capacity_ = 0;    // constant after construction
  std::size_t slot_bytes_ = 0;  // constant after construction

  // Locked by a decoder for every batch: on cache lines of its own, apart from the
  // trainer's held count below, which every get_batch reads and writes.
  alignas(64) Mutex free_mutex_;
  // Capacity reserved up front for both.
  std::vector<std::unique_ptr<BatchSlot>> slots_ TF_GUARDED_BY(free_mutex_);
  std::vector<BatchSlot*> free_ TF_GUARDED_BY(free_mutex_);
  std::atomic<std::size_t> size_{0};

  alignas(64) std::atomic<std::size_t> held_{0};
  friend class tokenfeed::Batch;
};

}  // namespace tokenfeed::detail
