// EpisodeSampler: which episodes make up batch k of a split, for this rank.
//
// The whole order is a pure function of (kept ids, sampling config, split, k):
//  - epoch mode: epoch e's order is kept[np.random.RandomState(epoch_seed + e)
//    .permutation(len(kept))] (or kept itself without shuffling). Global batch j of an
//    epoch is positions [j*B*W, (j+1)*B*W) of that order and rank r takes the r-th slice of
//    B. With drop_last the remainder smaller than a global batch is skipped; without it the
//    last global batch is completed with fill rows (episode id -1).
//  - random mode: global row g = k*B*W + r*B + i (row i of rank r's batch k) draws
//    kept[u] with u uniform, from a counter-based generator keyed on (epoch_seed, split) at
//    counter g.
// Either way the global stream (row g of global batch k) depends on the global batch B*W
// only, never on its split across ranks; resuming at step k needs only k, and decoding
// batches in parallel needs no shared generator.
//
// With a shape schedule (Settings::schedule, a batch-size warmup) the global batch B*W is
// the schedule's at step k and the rows are consumed in sequence (shape_schedule.hpp): in
// random mode global row g counts the rows of every earlier step, in epoch mode an epoch
// is taken in global batches of the size in force (its remainder after the last whole one
// skipped with drop_last), so batch k's first position is a sum over the stages before.
//
// Under a sequence-length curriculum over token-stream epoch windows (Settings::unit_tokens)
// the ids are units (the windows of the longest stage) and a batch's rows are pieces of
// them cut at the stage's length (ScheduledEpochs, units): a row's id is then
// unit id x unit_tokens + the piece's token offset in its unit.
//
// The ids need not be episodes: the token-stream mode samples window numbers the same way,
// and with truncation=split the SFT modes sample piece numbers (DocumentPieces): epoch e's
// order is then the documents in the order above, each replaced by its pieces in order.
// Under a sequence-length curriculum (pieces numbered by tokens, epoch mode) the documents
// are cut instead into rows of the block size of the global row each falls on, from the
// token reached (DocumentPieces::cut): epoch e's order is its rows from global row G_e on
// (CutEpochs), and a row's id is its first token's number. In random mode under such a
// curriculum global row g of a step of block size T draws u uniform in [0, N_T) at counter
// g, N_T the pieces at T + 1 of all kept documents (DocumentPieces::PieceTable, one per
// distinct stage length), and holds piece u: piece j of kept document k, the row whose id
// is first_token(k) + j*T. A stage at the key's block size draws exactly today's pieces.
// With pieces numbered by tokens and no schedule (sft_packed under a sequence-length
// curriculum, whose packer cuts the documents at each row's length: pack_pieces) the ids
// are the documents themselves.
//
// The sampler is pure arithmetic: it makes an epoch's order when asked and keeps none. The
// modes keep the orders in use and make the next one ahead (modes/epoch_orders.hpp).
//
// Thread-safety: immutable after construction; every member may be called concurrently.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "sampling/document_pieces.hpp"
#include "sampling/shape_schedule.hpp"
#include "tokenfeed/config.hpp"
#include "util/id_list.hpp"

namespace tokenfeed {

// One epoch's order over the kept ids (global episode ids), shared immutably; stored as
// narrowly as the kept ids (IdList).
using EpochOrder = IdList;

// Where batch `step` is in the stream, with its epoch's order: all row_episode() needs.
struct SampledBatch {
  std::uint64_t step = 0;                   // index of the batch in the split's stream
  std::uint64_t epoch = 0;                  // 0 in random mode
  std::uint64_t batch_in_epoch = 0;         // == step in random mode
  std::uint64_t first_row = 0;              // the global batch's first position: in the epoch's
                                            // order, or (random mode) the global row counter
  std::uint64_t offset = 0;                 // with units: the first row's token offset in its unit
  std::uint64_t rows = 0;                   // this rank's rows (the batch size in force)
  std::uint64_t cols = 0;                   // the block size in force; 0: the split's (no schedule)
  std::uint64_t ids = 0;                    // random mode: the ids drawn from (size(), or the stage's)
  std::shared_ptr<const EpochOrder> order;  // epoch mode only
};

class EpisodeSampler {
 public:
  struct Settings {
    SamplingMode mode = SamplingMode::epoch;
    bool shuffle = true;
    bool drop_last = true;
    std::uint32_t seed = 1337;
    std::uint64_t batch_size = 1;  // rows per rank
    std::uint64_t world_size = 1;
    std::uint64_t rank = 0;
    std::string split;  // keys the random-mode generator
    // The global batch at each step (a batch-size warmup), each stage's a multiple of
    // world_size; null: batch_size x world_size at every step.
    std::shared_ptr<const ShapeSchedule> schedule;
    // Random mode under a schedule whose stages change the block size: the ids each stage
    // draws from (a token stream's window starts depend on the window's length), one per
    // stage of `schedule`; empty: size() at every step.
    std::vector<std::uint64_t> ids_per_stage;
    // Epoch mode under a schedule whose stages change the block size (token-stream epoch
    // windows): the ids are units of this many tokens, which each stage cuts into rows of
    // its block size + 1 (shape_schedule.hpp); row_episode() gives unit id x unit_tokens +
    // the row's token offset in the unit. 0: each id is a row.
    std::uint64_t unit_tokens = 0;
    // Random mode with truncation=split as a mixture's source under the mixture's
    // sequence-length schedule (no schedule of its own): the block sizes its rows are drawn
    // at (SampledRowSource::row_id's cols), each among the pieces at that length, as a
    // schedule's stages would be. Empty: the schedule's lengths, or the key's only.
    std::vector<std::uint64_t> draw_block_sizes;
  };

  // Samples from `kept` (ascending ids). In epoch mode with fewer ids than one global
  // batch and drop_last, batches_per_epoch() is 0 and plan() throws Error(config): the
  // owner decides whether that is an error at open (train) or only when used (val).
  EpisodeSampler(IdList kept, Settings settings);
  // Samples from the ids 0..count-1 without storing them (token-stream windows and
  // window starts, which can number in the billions).
  struct IdRange {
    std::uint64_t count = 0;
  };
  EpisodeSampler(IdRange range, Settings settings);
  // Samples the piece numbers of `pieces` (truncation=split): an epoch's order permutes
  // pieces->kept() as the kept-id constructor would, and lists each document's pieces in
  // its place; random mode draws piece numbers uniformly.
  EpisodeSampler(std::shared_ptr<const DocumentPieces> pieces, Settings settings);

  const Settings& settings() const noexcept { return settings_; }
  // How many ids are sampled from, and the i-th of them.
  std::uint64_t size() const noexcept { return count_; }
  std::uint64_t id_at(std::uint64_t i) const noexcept { return pieces_ && !documents_cut_by_packer_ ? i : kept_[i]; }
  // Ids epoch `epoch`'s order holds: size(), or with cut epochs (truncation=split under a
  // sequence-length curriculum) that epoch's rows, which depend on where it starts.
  std::uint64_t ids_in_epoch(std::uint64_t epoch) const { return cut_ ? cut_->rows_in_epoch(epoch) : count_; }
  // How many kept ids the sampled ids come from: size(), or the documents of the pieces.
  std::uint64_t kept_size() const noexcept { return kept_.size(); }
  // Ids a random draw at block size T is made from: size(), or with draws at each length
  // (pieces numbered by tokens) the pieces at T. REQUIRES: T is a length the sampler draws
  // at (a stage's, one of Settings::draw_block_sizes, or the key's).
  std::uint64_t ids_at_block_size(std::uint64_t T) const noexcept {
    return tables_.empty() ? count_ : table_at(T).size();
  }
  // The pieces whose numbers are sampled (or, documents_ordered(), which the packer cuts);
  // null when the ids are sampled themselves.
  const DocumentPieces* pieces() const noexcept { return pieces_.get(); }
  // Whether the ids of an epoch's order are documents (kept ids) that the packer cuts,
  // though pieces() is set.
  bool documents_ordered() const noexcept { return documents_cut_by_packer_; }

  // Batches per epoch (epoch mode; 0 when not even one fits); 0 in random mode, which has
  // no epochs. With a shape schedule, epoch 0's.
  std::uint64_t batches_per_epoch() const noexcept { return batches_per_epoch_; }
  // Batches in epoch `epoch`: batches_per_epoch(), or with a shape schedule that epoch's.
  std::uint64_t batches_in_epoch(std::uint64_t epoch) const {
    return cut_ ? cut_->batches_in_epoch(epoch) : scheduled_ ? scheduled_->batches_in_epoch(epoch) : batches_per_epoch_;
  }
  // Ids an epoch delivers over all ranks: all of them, or fewer when drop_last skips a
  // remainder. 0 in random mode.
  std::uint64_t samples_per_epoch() const noexcept {
    return std::min(count_, batches_per_epoch_ * settings_.batch_size * settings_.world_size);
  }
  // The same for epoch `epoch` (with a shape schedule, the remainder differs by epoch).
  std::uint64_t samples_in_epoch(std::uint64_t epoch) const {
    return cut_         ? cut_->samples_in_epoch(epoch)
           : scheduled_ ? scheduled_->samples_in_epoch(epoch)
                        : samples_per_epoch();
  }
  // The first shape-schedule stage whose global batch exceeds the ids with drop_last (epoch
  // mode): no batch forms there. nullopt without a schedule or when every stage forms one.
  std::optional<std::size_t> short_stage() const noexcept { return short_stage_; }
  // This rank's rows at `step`: batch_size, or the schedule's global batch / world_size.
  std::uint64_t rows_at(std::uint64_t step) const noexcept {
    return settings_.schedule ? settings_.schedule->global_batch_at(step) / settings_.world_size : settings_.batch_size;
  }

  // Batch `step`'s epoch and place in it, without the order. Throws Error(config) in
  // epoch mode when not even one batch fits.
  SampledBatch position(std::uint64_t step) const;
  // position(step) with the epoch's order made afresh (tools and tests; a mode takes its
  // orders from EpochOrders, which keeps them).
  SampledBatch plan(std::uint64_t step) const;

  // The episode of row `row` of the batch, or -1 for a fill row.
  std::int64_t row_episode(const SampledBatch& batch, std::uint64_t row) const noexcept;

  // Rows of this rank's batch that are real episodes (the rest are fill rows).
  std::uint64_t real_rows(const SampledBatch& batch) const noexcept;

  // Epoch e's order (kept ids, or piece numbers), made afresh: a permutation of the kept ids
  // (then expanded into pieces), which takes the
  // best part of a second for 10M of them, in the kept ids' storage (4 bytes an id below
  // 2^32). Epoch mode only.
  EpochOrder make_epoch_order(std::uint64_t epoch) const;
  std::shared_ptr<const EpochOrder> epoch_order(std::uint64_t epoch) const {
    return std::make_shared<const EpochOrder>(make_epoch_order(epoch));
  }

 private:
  IdList kept_;                                   // iota for an IdRange
  std::shared_ptr<const DocumentPieces> pieces_;  // truncation=split: the ids are its piece numbers
  bool documents_cut_by_packer_ = false;          // pieces_ by tokens, no schedule: the ids are documents
  std::uint64_t count_ = 0;                       // kept_.size(), or pieces_->size()
  Settings settings_;
  std::uint64_t batches_per_epoch_ = 0;
  std::uint64_t random_key_ = 0;
  // Epoch mode with a shape schedule that forms batches: where each step stands.
  std::optional<ScheduledEpochs> scheduled_;
  // Epoch mode with pieces numbered by tokens (a sequence-length curriculum): cut epochs.
  std::optional<CutEpochs> cut_;
  // Random mode with pieces numbered by tokens: the pieces at each distinct length drawn at.
  std::vector<DocumentPieces::PieceTable> tables_;
  std::optional<std::size_t> short_stage_;  // the first schedule stage that forms no batch

  // batches_per_epoch_ from count_ and the settings.
  void count_batches();  // throws Error(config) when batch_size x world_size overflows
  // Epoch e's order of the kept ids (the documents, with pieces).
  IdList kept_order(std::uint64_t epoch) const;
  // Epoch e's documents cut into rows from global row `first_row` on (cut epochs).
  IdList cut_order(std::uint64_t epoch, std::uint64_t first_row) const;
  // The piece table of block size T (random draws from pieces numbered by tokens).
  // REQUIRES: tables_ holds one at T (every stage length's).
  const DocumentPieces::PieceTable& table_at(std::uint64_t T) const noexcept;
};

}  // namespace tokenfeed
