// BatchPool: the fixed set of batch buffers a split's pipeline cycles through.
//
// Every buffer is allocated once, at construction; the steady state allocates nothing.
// A slot is acquired by a decode stage, travels through the pipeline to the ready ring,
// is handed to the trainer inside a Batch, and returns here when the Batch is released.
// The pool outlives its pipeline when the trainer still holds batches (shared_ptr).
//
// Thread-safety: acquire/release/set_release_listener are thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tokenfeed/batch.hpp"

namespace tokenfeed::detail {

struct BatchShape {
  std::size_t rows = 0;
  std::size_t cols = 0;
  bool with_mask = false;
  bool with_document_fields = false;  // doc_ids and position_ids (document-aware token streams)
};

struct BatchSlot {
  // Buffers, sized once.
  std::vector<std::int64_t> x, y, episode_ids;
  std::vector<float> mask;  // empty when the mask is off
  std::vector<std::int32_t> doc_ids, position_ids;  // empty unless document-aware

  // Bookkeeping written by the decode stage.
  std::uint64_t sequence = 0;  // position in the pipeline's output order (for the sequencer)
  std::uint64_t step = 0, epoch = 0, batch_in_epoch = 0;
  std::uint64_t real_rows = 0;
  std::exception_ptr error;  // set when the stage that produced this slot failed
  double wait_us = 0;        // set by get_batch

  // Release/acquire hand-off between the stages that write and read the slot, so that
  // the ordering is visible to ThreadSanitizer through our own atomics (the TBB runtime
  // that schedules the stages is not instrumented).
  std::atomic<std::uint64_t> handoff{0};
  void publish() noexcept { handoff.fetch_add(1, std::memory_order_release); }
  void observe() const noexcept { (void)handoff.load(std::memory_order_acquire); }
};

class BatchPool : public std::enable_shared_from_this<BatchPool> {
 public:
  BatchPool(std::size_t slots, BatchShape shape, std::string split);

  // A free slot, or nullptr when every slot is in use.
  BatchSlot* acquire() noexcept;
  // Returns a slot to the free list (from a released Batch, or an error slot).
  void release(BatchSlot* slot) noexcept;

  // Wraps a slot the trainer now owns; counted in held() until the Batch is released.
  Batch make_batch(BatchSlot* slot);
  // Slots currently inside Batches the trainer has not released.
  std::size_t held() const noexcept { return held_.load(std::memory_order_acquire); }

  const BatchShape& shape() const noexcept { return shape_; }
  const std::string& split() const noexcept { return split_; }
  std::size_t size() const noexcept { return slots_.size(); }

 private:
  BatchShape shape_;
  std::string split_;
  std::vector<std::unique_ptr<BatchSlot>> slots_;

  std::mutex free_mutex_;
  std::vector<BatchSlot*> free_;  // GUARDED_BY(free_mutex_); capacity reserved up front

  std::atomic<std::size_t> held_{0};
  friend class tokenfeed::Batch;
};

}  // namespace tokenfeed::detail
