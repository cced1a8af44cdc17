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
class DeferredFields;

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
  // Set by a mode whose y and contract fields (labels, position_ids, cu_seqlens) follow
  // from its other fields: they are left unwritten while the trainer does not read them
  // (see FieldDemand), and written by this when it does. Null: always written.
  const DeferredFields* deferred = nullptr;
  std::int64_t pad_token_id = 0;     // for `deferred`: y's padding
  std::int64_t ignore_index = -100;  // for `deferred`: the labels' ignore_index
};

// How a mode writes a slot's deferred fields from the rest of it (BatchShape::deferred).
// Implementations are stateless (their parameters are the shape's), and live as long as
// the program: a pool may outlive the loader that made it.
// Thread-safety: write_* run under the slot's deferred_mutex, on a slot no decoder writes.
class DeferredFields {
 public:
  virtual ~DeferredFields() = default;
  // y from x and the slot's per-row bookkeeping (row_targets, row_last_target).
  virtual void write_y(BatchSlot& slot, const BatchShape& shape) const noexcept = 0;
  // labels, position_ids and the sequences from y, the token weights and row_targets.
  // REQUIRES: y written.
  virtual void write_contract(BatchSlot& slot, const BatchShape& shape) const noexcept = 0;
};

// Which of a split's deferrable fields (BatchShape::deferred) the trainer reads. The
// decoders leave a field unwritten once a batch was released before the trainer ever read
// that field, and write it again from the trainer's first read of it on; batches made in
// between are completed at that read, or when they are handed out after it.
// Thread-safety: every member is atomic.
struct FieldDemand {
  std::atomic<bool> y_read{false}, contract_read{false};
  std::atomic<bool> y_unread{false}, contract_unread{false};  // a batch was released before the first read

  bool defer_y() const noexcept {
    return y_unread.load(std::memory_order_relaxed) && !y_read.load(std::memory_order_relaxed);
  }
  bool defer_contract() const noexcept {
    return contract_unread.load(std::memory_order_relaxed) && !contract_read.load(std::memory_order_relaxed);
  }
  static void mark(std::atomic<bool>& flag) noexcept {
    if (!flag.load(std::memory_order_relaxed)) flag.store(true, std::memory_order_relaxed);
  }
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
  std::uint64_t real_positions = 0;      // input positions that belong to an episode or window
  // Deferred fields (BatchShape::deferred): per row, what the mode keeps to write them
  // later (sft_episode: its sequence's length and the target of its last real input);
  // whether this batch's y and contract fields are still unwritten; the pool's demand
  // (null: nothing deferred).
  std::vector<std::uint32_t> row_targets;
  std::vector<std::int64_t> row_last_target;
  std::atomic<bool> y_deferred{false}, contract_deferred{false};
  const FieldDemand* demand = nullptr;
  Mutex deferred_mutex;                            // held while a reader completes the deferred fields
  std::vector<tokenfeed::PackedSegment> segments;  // packed mode; capacity rows * full_cols, `segment_count` used
  std::size_t segment_count = 0;
  // RL batches only (empty otherwise): log_probs B x T, and per sequence of cu_seqlens its
  // reward and group id (capacity as cu_seqlens; num_sequences used).
  std::vector<float> log_probs;
  std::vector<float> rewards;
  std::vector<std::int64_t> group_ids;
  bool log_probs_given = false;  // some group of the batch gave log-probs

  // Starts filling the slot for a batch: its bookkeeping, and empty sequence and segment
  // lists. Every decoder calls it first.
  void begin_batch(std::uint64_t batch_step, std::uint64_t batch_epoch, std::uint64_t index_in_epoch,
                   std::uint64_t rows_real) noexcept {
    step = batch_step;
    epoch = batch_epoch;
    batch_in_epoch = index_in_epoch;
    real_rows = rows_real;
    real_positions = 0;
    segment_count = 0;
    begin_sequences();
    // Ordered before the trainer's reads by the slot's hand-off (publish/observe).
    y_deferred.store(demand != nullptr && demand->defer_y(), std::memory_order_relaxed);
    contract_deferred.store(demand != nullptr && demand->defer_contract(), std::memory_order_relaxed);
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

  // Bookkeeping written by the decode stage.
  int decoder = -1;               // the decoder that last filled it (BatchPool::acquire)
  BatchSlot* run_next = nullptr;  // the next batch of its run through the pipeline's graph, if any
  std::uint64_t sequence = 0;  // position in the pipeline's output order (for the sequencer)
  std::uint64_t step = 0, epoch = 0, batch_in_epoch = 0;
  std::uint64_t real_rows = 0;
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
  // First completes the deferred fields the trainer has read before (complete_y,
  // complete_contract), so that it gets them whole.
  Batch make_batch(BatchSlot* slot);
  // Slots currently inside Batches the trainer has not released.
  std::size_t held() const noexcept { return held_.load(std::memory_order_acquire); }

  // Called by Batch before it hands out y, or a contract field: notes that the trainer
  // reads it, so that the decoders write it from now on, and has the shape's
  // DeferredFields write `slot`'s field if its decoder deferred it, as a decoder would
  // have. That reads the batch's arrays as they are: a trainer that changed them in place
  // before its first read of a field changes that field too. Thread-safe: concurrent
  // readers of the same batch write it once. Do nothing for a shape without `deferred`.
  void complete_y(BatchSlot& slot) noexcept;
  void complete_contract(BatchSlot& slot) noexcept;
  // What the trainer has read of this split's deferrable fields so far.
  const FieldDemand& demand() const noexcept { return demand_; }

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

  Mutex free_mutex_;
  // Capacity reserved up front for both.
  std::vector<std::unique_ptr<BatchSlot>> slots_ TF_GUARDED_BY(free_mutex_);
  std::vector<BatchSlot*> free_ TF_GUARDED_BY(free_mutex_);
  std::atomic<std::size_t> size_{0};

  std::atomic<std::size_t> held_{0};
  FieldDemand demand_;  // see complete_y, complete_contract
  // Writes `slot`'s deferred y and clears its flag.
  void write_deferred_y(BatchSlot& slot) const noexcept TF_REQUIRES(slot.deferred_mutex);
  // A Batch of `slot` is being released: the fields the trainer has not read so far are
  // deferred from now on.
  void note_release() noexcept;
  friend class tokenfeed::Batch;
};

}  // namespace tokenfeed::detail
