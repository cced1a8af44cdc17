// PackedBatchSource: the sft_packed mode's batches: several whole episodes per row.
//
// Each epoch's episode order (the same numpy-compatible order as sft_episode) is packed
// into rows by pack_episodes. The rows of all epochs, epoch after epoch, form one global
// row stream; a global batch is B*W consecutive rows of it and rank r takes the r-th slice
// of B rows (with balance_ranks=attention, the B rows balance_rows gives it). So the stream
// depends on the global batch B*W only, never on its split across ranks, and a state saved
// at one world size resumes at another with the same B*W.
//  - epoch_drop_last=true: nothing is dropped. An epoch's last rows, too few for a global
//    batch, open the next batch, which continues with the next epoch's first rows: every
//    kept episode is trained once per epoch, whatever its length.
//  - epoch_drop_last=false: a batch never continues into the next epoch; an epoch's last
//    batch is completed with fill rows (episode id -1).
// An episode t kept to length n <= block_size + 1 contributes inputs t[0:n-1] and labels
// t[1:n] to its row, positions restarting at 0, weights = its mask shifted the same way (1
// with the mask off); the rest of a row is padding (pad, ignore_index, weight 0), a
// sequence of its own. With truncation=split the packed units are the pieces of the
// episodes (the sampler's piece numbers, DocumentPieces), each packed as an episode of its
// own (its segment carrying its episode's id), a document's pieces in order in the stream.
// Under a sequence-length schedule the documents are cut while they are packed instead, each
// piece at the length of the row it lands in (pack_pieces: where the length changes, the
// documents not yet placed are cut anew from the token reached), a unit's id its first
// token's number (DocumentPieces::Numbering::tokens).
//
// Under a sequence-length schedule (shape_schedule stages of different block_size) global
// row g has the block size T of the step whose rows hold it, and an epoch starting at
// global row G is packed with row r's capacity T(G + r): where T changes, the packer goes on
// with the episodes not yet placed at the new length (pack_episodes' PackStage), so the
// rest of the epoch is re-packed from the episode reached, nothing skipped or repeated. A
// row keeps each episode at its T + 1 tokens (the windows of that length). G follows from
// the position: G = rows_before(step) - row_in_epoch (ShapeSchedule), so an epoch's packing
// is a pure function of (epoch, G). docs/schedules.md states the rule.
//
// A batch belongs to the epoch of its first row, and batches are numbered within that
// epoch. The position in the stream is (epoch, row in epoch, batch in epoch), advanced by
// the serial planning stage; the rows of epoch e are a pure function of e.
//
// Thread-safety: plan() walks the epochs with a cursor that seek() sets; the two may be
// called from different threads (guarded by a mutex). decode() and the const members may
// run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "pipeline/batch_source.hpp"
#include "pipeline/recent_cache.hpp"
#include "pipeline/stream_position.hpp"
#include "sampling/episode_packer.hpp"
#include "sampling/shape_schedule.hpp"
#include "modes/episode_window.hpp"
#include "modes/epoch_orders.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed {

// What a packed batch is made of, planned by PackedBatchSource::plan and carried to its
// decode as the plan's mode data: the global batch's rows, in order, as runs of
// consecutive rows of epoch packings (a batch may continue into the next epoch), and
// where the batch starts and the next one starts.
struct PackedPlan {
  struct Run {
    std::shared_ptr<const PackedEpoch> packing;
    std::uint64_t first_row = 0;
    std::uint64_t rows = 0;
  };
  std::vector<Run> runs;
  std::uint64_t row_in_epoch = 0;
  std::uint64_t block_size = 0;  // the rows' length at this step
  std::uint64_t next_epoch = 0, next_row_in_epoch = 0;
  // balance_ranks=attention: this rank's rows of the global batch, in increasing order
  // (balance_rows), and the ranks' attention costs under the plain slicing and balanced.
  // Empty: rank r's rows are [r * B, (r + 1) * B).
  std::vector<std::uint32_t> rows;
  std::uint64_t rank_rows = 0;  // this rank's rows at this step (batch_size, or the schedule's)
  std::uint64_t sliced_max = 0, balanced_max = 0;
  double mean = 0;
};

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
    // Context parallelism (docs/batch-contract.md): each episode padded to a multiple of
    // `sequence_multiple` positions (2·cp; 1: none), counted so by the packer; with
    // `split_ranks` = cp > 1 (context_parallel_split), only CP rank `split_rank`'s share
    // of each row is written, straight from the episodes, into rows of block_size / cp.
    std::size_t sequence_multiple = 1;
    std::size_t split_ranks = 1;
    std::size_t split_rank = 0;
    // balance_ranks=attention: the global batch's rows go to the ranks by balance_rows
    // over their attention costs (sampling/rank_balance.hpp) instead of in slices.
    bool balance_attention = false;
    // A batch-size schedule: the global batch of each step (a multiple of world_size);
    // null: batch_size x world_size.
    std::shared_ptr<const ShapeSchedule> schedule;
  };

  // `orders` gives each epoch's episode order (its sampler's batch settings are not used).
  // Under a sequence-length schedule, `stage_windows` are the windows of every stage length
  // other than `windows`'. REQUIRES: split, windows and orders outlive the source.
  PackedBatchSource(const EpisodeSplit& split, const EpisodeWindows& windows, const EpochOrders& orders,
                    Options options, std::vector<const EpisodeWindows*> stage_windows = {});

  // Plans `step`, which must follow the previous plan (or the seek); throws
  // Error(pipeline) otherwise.
  BatchPlan plan(std::uint64_t step) override;
  void decode(const BatchPlan& plan, detail::BatchSlot& slot) const override;
  void check_intact() const override { split_.check_intact(); }
  // The batches of an epoch entered at its first row (epoch 0, or any epoch with
  // drop_last=false); see batches_in_epoch_at for an epoch entered mid-batch. Under a
  // sequence-length schedule: the batches whose first row is in the epoch, its first row
  // found by packing the epochs before it (a walk; the loader itself uses
  // batches_in_epoch_at).
  std::uint64_t batches_in_epoch(std::uint64_t epoch) const override;
  // The batches whose first row is in the epoch of `at`, the position of one of them.
  std::uint64_t batches_in_epoch_at(const SplitPosition& at) const;
  // Every kept episode: nothing is dropped.
  std::uint64_t samples_in_epoch(std::uint64_t epoch) const override;
  void seek(const SplitPosition& at) override;

  // The packing of an epoch that starts at global row `first_row` (cached: the two most
  // recent). Without a sequence-length schedule the packing does not depend on first_row.
  std::shared_ptr<const PackedEpoch> packing(std::uint64_t epoch, std::uint64_t first_row = 0) const;
  // The global row where the epoch of `at` starts (0 without a sequence-length schedule,
  // where it does not matter). Throws Error(state) when at.row_in_epoch exceeds the rows
  // before at.step.
  std::uint64_t first_row_of(const SplitPosition& at) const;
  // Whether the rows change length (a sequence-length schedule).
  bool changes_length() const noexcept { return curriculum_; }
  // The rows of the epoch packed at one length throughout (not cached). REQUIRES:
  // block_size is the key's or a stage's.
  std::uint64_t rows_at_length(std::uint64_t epoch, std::size_t block_size) const;

 private:
  // Rows of the global batch at `step`: the schedule's, or batch_size x world_size.
  std::uint64_t global_batch_at(std::uint64_t step) const noexcept;
  const EpisodeSplit& split_;
  const EpochOrders& orders_;
  Options options_;
  const DocumentPieces* pieces_;  // truncation=split: the units are its pieces; else null
  std::vector<bool> follows_;     // per piece: it follows the previous one (split only)
  // What the rows of one length (block size) read: the first is the key's block_size.
  struct Length {
    std::size_t block_size = 0;
    const EpisodeWindows* windows = nullptr;  // S() == block_size + 1
    std::vector<std::uint32_t> positions_of;  // per unit (episode id, or piece): kept length - 1 (0: not kept);
                                              // empty when the packer cuts (cuts_while_packing_)
    std::vector<std::uint32_t> occupied;      // context parallelism: positions_of padded (else empty)
  };
  std::vector<Length> lengths_;
  bool curriculum_ = false;          // the schedule changes block_size
  bool cuts_while_packing_ = false;  // truncation=split under it: the units are cut by pack_pieces

  const Length& length(std::size_t block_size) const noexcept;
  // The positions unit k of `packed` holds in its row of `at`'s length, and what it occupies
  // there (with context-parallel padding).
  std::uint32_t unit_positions(const Length& at, const PackedEpoch& packed, std::uint64_t k) const noexcept;
  std::uint32_t unit_occupies(const Length& at, const PackedEpoch& packed, std::uint64_t k) const noexcept;
  std::size_t block_size_at(std::uint64_t step) const noexcept;
  // Where the epoch after one that starts at global row `first_row` and packs into `rows`
  // rows starts.
  std::uint64_t next_first_row(std::uint64_t first_row, std::uint64_t rows) const;
  PackedEpoch make_packing(std::uint64_t epoch, std::uint64_t first_row) const;
  // Under a sequence-length schedule: throws Error(pipeline) when a row of the plan holds
  // more than the step's block size (a packing made for other lengths would overrun the
  // rows; never by construction, but a guard costs a pass over the batch's ids).
  void check_fits(const PackedPlan& plan, std::uint64_t step) const;
  // balance_attention: sets plan.rows and the costs from the global batch's rows.
  void balance(PackedPlan& plan) const;
  // Writes global row `row` of `packed` (null: a fill row) into row `r` of `slot` with
  // context-parallel padding, and this rank's share of it when splitting; returns its
  // real positions.
  std::size_t decode_padded_row(const Length& at, const PackedEpoch* packed, std::uint64_t row, std::size_t r,
                                detail::BatchSlot& slot) const;
  // Writes positions [first, first + count) of a sequence of `real` positions (its
  // episode's kept ones; then padding) at `at` of `slot`: a `kept` of null is a row's
  // trailing padding, whose positions count from 0.
  void write_sequence_part(const EpisodeWindows& windows, const EpisodeWindows::Kept* kept, std::size_t real,
                           std::size_t first, std::size_t count, std::size_t at,
                           detail::BatchSlot& slot) const noexcept;

  // The epoch being consumed and the next one, by (epoch, first row; 0 without a
  // sequence-length schedule). Declared after what make_packing reads: its destructor
  // waits for a background make.
  RecentCache<PackedEpoch, std::pair<std::uint64_t, std::uint64_t>> packings_{2};

  Mutex mutex_;
  SplitPosition next_ TF_GUARDED_BY(mutex_);
};

}  // namespace tokenfeed
