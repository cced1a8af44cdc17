// tokenfeed::Batch: one ready batch, handed to the trainer by Loader::get_batch.
//
// A Batch is a move-only handle on pooled buffers: its arrays stay valid until the Batch
// is destroyed or release() is called, even after the Loader is gone; then the buffers
// return to the pool for reuse. Holding a batch keeps one pool buffer out of the prefetch
// ring, so release batches promptly (a trainer typically holds one at a time).
//
// One batch contract for every mode (dataset_mode sft_episode, sft_packed, token_stream).
// Every array is row-major, rows() x cols() = batch_size x block_size (under a
// shape_schedule, the step's) unless noted:
//
//   tokens        int64   the inputs
//   labels        int64   the next-token targets, ignore_index where no loss applies
//                         (padding, mask 0, a label across a document or episode boundary)
//   token_weights float32 the loss weight of each position: the loss mask in SFT, 1
//                         elsewhere, 0 on padding and wherever labels is ignore_index
//   position_ids  int32   positions restarting at 0 at each sequence (episode, document,
//                         or the padding at the end of a row)
//   cu_seqlens    int32   num_sequences() + 1 boundaries over the flattened rows*cols
//                         positions, for variable-length attention: sequence i covers
//                         [cu_seqlens[i], cu_seqlens[i+1]); a row's trailing padding is a
//                         sequence of its own (with weight 0), so the last entry is rows*cols
//   cu_seqlens_padded
//                 int32   num_sequences() + 1: equal to cu_seqlens, unless sequences are
//                         padded for context parallelism (below)
//
// Context parallelism (Config::context_parallel_size = cp > 1; docs/batch-contract.md,
// "Context parallelism"), as TransformerEngine's THD format defines the two arrays: in
// sft_packed and a document-aware token_stream every sequence of a row is padded to a
// multiple of 2*cp positions (pad in tokens, ignore_index in labels, 0 in token_weights,
// position_ids continuing the sequence's count). cu_seqlens_padded then holds the
// cumulative padded lengths, the sequences' offsets over the flattened positions (a row's
// trailing padding a sequence of its own, as long padded as real), and cu_seqlens the
// cumulative real lengths: sequence i has cu_seqlens[i+1] - cu_seqlens[i] real positions
// starting at offset cu_seqlens_padded[i]. max_seqlen() is the longest real sequence.
// With Config::context_parallel_split, the B x T arrays (tokens, labels, token_weights,
// position_ids, and x, y, mask, doc_ids) hold only this CP rank's share: each sequence's
// padded span of n positions cut into 2*cp chunks of n / (2*cp), rank r keeping chunks r
// and 2*cp-1-r in that order (the whole row being the one sequence in sft_episode and a
// plain token_stream), so cols() is block_size / cp; position_ids stay the sequence's own
// (global) positions. The bookkeeping describes the whole rows every CP rank shares:
// cu_seqlens, cu_seqlens_padded, num_sequences(), max_seqlen(), real_positions() (over
// rows() * cols() * cp), segments() and the ids.
//
// Config::fields chooses the fields a trainer reads (BatchField below; default every one):
// the decoders write those (sft_episode leaves y, or labels, position_ids and cu_seqlens,
// unwritten when none of them is chosen), and the accessor of a field not chosen throws
// Error(usage) naming it, where the others never throw. has_field() asks.
//
// With Config::contract_fields false (not allowed for sft_packed), token_weights and
// cu_seqlens are empty and num_sequences() and max_seqlen() are 0 in every mode; the mode's
// own view below and real_positions() are unchanged. What differs by mode:
//   sft_episode   labels and position_ids are empty too.
//   token_stream  labels is still filled: it is y, the same memory (ignore_index where a
//                 document-aware label crosses a document). position_ids is filled, with
//                 doc_ids, when document-aware, and empty otherwise.
//
// The episode mode's own view is kept as it was: x (== tokens), y (the raw next tokens,
// pad on padding), mask (float32 aligned to y; empty when off). In sft_packed and
// token_stream, y is labels; with the mask on, mask is token_weights (the same memory).
// Also:
//
//   episode_ids int64, one per row: the global episode id (sft_episode), the row's first
//           episode (sft_packed), or the window id (token_stream: the global window number
//           in epoch mode, the global token offset of the window start in random mode;
//           epoch mode under a sequence-length schedule: unit x (longest block_size + 1) +
//           the row's token offset in the unit, docs/schedules.md);
//           -1 for a fill row
//   doc_ids int32 (document-aware token streams; empty otherwise): the running document
//           index of each input position
//
// RL batches (GroupBatcher, include/tokenfeed/rl.hpp) fill the contract with several
// prompt+completion sequences per row, token_weights being each completion's advantage
// on its label positions, and three fields that are empty in every other mode:
//
//   log_probs float32 B x T: the sampler's log-probabilities aligned to labels, 0 elsewhere
//             (empty when the sampler gave none)
//   rewards   float32, num_sequences(): each sequence's reward (0 for padding)
//   group_ids int64, num_sequences(): each sequence's group (-1 for padding)
//
// Thread-safety: a Batch may be read from any thread; release/destruction must not race
// with reads of the same Batch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "tokenfeed/export.hpp"

namespace tokenfeed {

namespace detail {
class BatchPool;
struct BatchSlot;
}  // namespace detail

// One episode placed in a packed row (sft_packed), so the packing can be checked.
struct PackedSegment {
  std::uint32_t row = 0;
  std::uint32_t column = 0;     // its first input position in the (whole) row
  std::uint32_t positions = 0;  // input positions it occupies: its kept length - 1 (any
                                // context-parallel padding follows)
  std::int64_t episode = 0;     // global episode id
};

// The fields Config::fields chooses among, by their names there. cu_seqlens brings
// cu_seqlens_padded, num_sequences() and max_seqlen() with it.
enum class BatchField : std::uint8_t { x, y, mask, tokens, labels, token_weights, position_ids, cu_seqlens };
inline constexpr std::array<std::string_view, 8> kBatchFieldNames = {
    "x", "y", "mask", "tokens", "labels", "token_weights", "position_ids", "cu_seqlens"};
// A set of fields, one bit per BatchField; every field by default.
using BatchFields = std::uint32_t;
inline constexpr BatchFields kEveryBatchField = (1U << kBatchFieldNames.size()) - 1;
constexpr BatchFields batch_field_bit(BatchField field) noexcept { return 1U << static_cast<unsigned>(field); }
// The names of the fields in `fields`, in BatchField order, comma-separated ("x,y,mask").
inline std::string batch_field_list(BatchFields fields) {
  std::string text;
  for (std::size_t i = 0; i < kBatchFieldNames.size(); ++i) {
    if ((fields & batch_field_bit(static_cast<BatchField>(i))) == 0) continue;
    if (!text.empty()) text += ',';
    text += kBatchFieldNames[i];
  }
  return text;
}
// The field of that name, or nullopt.
constexpr std::optional<BatchField> batch_field_named(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kBatchFieldNames.size(); ++i) {
    if (kBatchFieldNames[i] == name) return static_cast<BatchField>(i);
  }
  return std::nullopt;
}

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
  std::size_t rows() const noexcept;              // batch_size (the schedule's at this step)
  std::size_t cols() const noexcept;              // block_size (the schedule's at this step)
  std::size_t real_rows() const noexcept;         // rows holding an episode; the rest are fill rows

  // Whether Config::fields chose `field` (false for an invalid Batch).
  bool has_field(BatchField field) const noexcept;

  // The mode's own view; each throws Error(usage) when Config::fields did not choose it.
  std::span<const std::int64_t> x() const;
  std::span<const std::int64_t> y() const;
  std::span<const float> mask() const;  // empty when the loss mask is off or absent
  bool has_mask() const noexcept;
  std::span<const std::int64_t> episode_ids() const noexcept;
  std::span<const std::int64_t> window_ids() const noexcept { return episode_ids(); }
  std::span<const std::int32_t> doc_ids() const noexcept;  // empty unless document-aware
  // A mixture: each row's source, as its index in the config's declaration order (see
  // Loader::source_names); empty for a single dataset.
  std::span<const std::int32_t> source_ids() const noexcept;

  // The batch contract (see above); each throws Error(usage) when Config::fields did not
  // choose it (the last three go with cu_seqlens).
  std::span<const std::int64_t> tokens() const;
  std::span<const std::int64_t> labels() const;
  std::span<const float> token_weights() const;
  std::span<const std::int32_t> position_ids() const;
  std::span<const std::int32_t> cu_seqlens() const;
  std::span<const std::int32_t> cu_seqlens_padded() const;
  std::size_t num_sequences() const;
  std::size_t max_seqlen() const;
  // Input positions holding episode or window tokens; over rows() * cols() it is the
  // packing efficiency (with context_parallel_split, over rows() * cols() * cp: it counts
  // the whole rows).
  std::size_t real_positions() const noexcept;
  // sft_packed: the episodes in row order; RL: the sequences in row order (episode: the
  // prompt's); empty in the other modes.
  std::span<const PackedSegment> segments() const noexcept;
  // RL batches only (see above); empty in the other modes.
  std::span<const float> log_probs() const noexcept;
  std::span<const float> rewards() const noexcept;
  std::span<const std::int64_t> group_ids() const noexcept;

  // How long get_batch waited for this batch on the caller's thread, in microseconds (after
  // try_get_batch calls that timed out, each made within 10 ms of the last, from the first
  // of them: one wait).
  double wait_us() const noexcept;

 private:
  friend class detail::BatchPool;
  Batch(std::shared_ptr<detail::BatchPool> pool, detail::BatchSlot* slot) noexcept;
  // Whether `field` may be handed out (false for an invalid Batch); throws Error(usage)
  // naming it when Config::fields did not choose it.
  bool readable(BatchField field) const;
  // rows() x cols(): how much of each grid buffer of the slot this batch uses.
  std::size_t cells() const noexcept;

  std::shared_ptr<detail::BatchPool> pool_;
  detail::BatchSlot* slot_ = nullptr;
};

}  // namespace tokenfeed
