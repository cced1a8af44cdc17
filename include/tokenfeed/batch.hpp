// tokenfeed::Batch: one ready batch, handed to the trainer by Loader::get_batch.
//
// A Batch is a move-only handle on pooled buffers: its arrays stay valid until the Batch
// is destroyed or release() is called, even after the Loader is gone; then the buffers
// return to the pool for reuse. Holding a batch keeps one pool buffer out of the prefetch
// ring, so release batches promptly (a trainer typically holds one at a time).
//
// Shapes (row-major, rows() x cols() = batch_size x block_size):
//   x, y    int64   inputs and next-token targets; y[i] = x[i+1] within an episode
//   mask    float32 the loss mask aligned to y (0 on padding); empty when the mask is off
//   episode_ids int64, one per row: the global episode id (sft_episode) or the window id
//           (token_stream: the global window number in epoch mode, the global token
//           offset of the window start in random mode); -1 for a fill row
//   doc_ids, position_ids int32 (document-aware token streams; empty otherwise): the
//           running document index of each input position, and positions restarting at 0
//           at each document start
//
// Thread-safety: a Batch may be read from any thread; release/destruction must not race
// with reads of the same Batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "tokenfeed/export.hpp"

namespace tokenfeed {

namespace detail {
class BatchPool;
struct BatchSlot;
}  // namespace detail

class TOKENFEED_API Batch {
 public:
  Batch() noexcept;
  ~Batch();
  Batch(Batch&& other) noexcept;
  Batch& operator=(Batch&& other) noexcept;
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  // False for a default-constructed, moved-from or released Batch.
  bool valid() const noexcept { return slot_ != nullptr; }
  explicit operator bool() const noexcept { return valid(); }

  // Returns the buffers to the pool now. The arrays must not be used afterwards.
  void release() noexcept;

  std::string_view split() const noexcept;
  std::uint64_t step() const noexcept;            // index of this batch in its split's stream
  std::uint64_t epoch() const noexcept;           // 0 in random mode
  std::uint64_t batch_in_epoch() const noexcept;  // == step in random mode
  std::size_t rows() const noexcept;              // batch_size
  std::size_t cols() const noexcept;              // block_size
  std::size_t real_rows() const noexcept;         // rows holding an episode; the rest are fill rows

  std::span<const std::int64_t> x() const noexcept;
  std::span<const std::int64_t> y() const noexcept;
  std::span<const float> mask() const noexcept;  // empty when the loss mask is off or absent
  bool has_mask() const noexcept;
  std::span<const std::int64_t> episode_ids() const noexcept;
  std::span<const std::int64_t> window_ids() const noexcept { return episode_ids(); }
  std::span<const std::int32_t> doc_ids() const noexcept;       // empty unless document-aware
  std::span<const std::int32_t> position_ids() const noexcept;  // empty unless document-aware

  // How long get_batch waited for this batch on the caller's thread, in microseconds.
  double wait_us() const noexcept;

 private:
  friend class detail::BatchPool;
  Batch(std::shared_ptr<detail::BatchPool> pool, detail::BatchSlot* slot) noexcept;

  std::shared_ptr<detail::BatchPool> pool_;
  detail::BatchSlot* slot_ = nullptr;
};

}  // namespace tokenfeed
