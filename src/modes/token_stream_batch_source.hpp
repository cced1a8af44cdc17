// TokenStreamBatchSource: the token_stream mode's batches. Each row is a window w of
// block_size + 1 consecutive tokens of one file (a window never straddles two files),
// x = w[:-1], y = w[1:]. A split chosen by document hash (TokenStreamSplit::ranges) is one
// stream instead, its runs of documents one after another: its windows are cut over that
// concatenation and may straddle runs (and files), its documents start where the runs and
// their files' indexes say.
//
//  - epoch mode: each file is carved into non-overlapping windows starting at
//    i * (block_size + 1) (the remainder of a file is unused); windows are numbered
//    globally across files and the sampler shuffles their numbers per epoch. Under a
//    sequence-length schedule (Options::unit_tokens) those windows, cut at the longest
//    stage length, are units: a row is a piece of one, of the batch's block size + 1
//    tokens from the token offset its id names (id = unit x unit_tokens + offset), the
//    unit's last piece shorter: a partial row (below).
//  - random mode: the sampler draws a global window start uniformly over every valid
//    start in every file. Under a sequence-length schedule (Options::block_sizes) a row
//    has the block size of its batch (BatchSlot::cols), and its id numbers the valid starts
//    of windows of that length.
//
// A partial row (a unit's last piece of n < block_size + 1 tokens) holds the piece's n - 1
// inputs with their targets, then padding as sft_episode pads a short episode: pad in x
// (x keeping the piece's last token in its first padding position), ignore_index in y, 0
// weights, positions from 0, a sequence of its own (and, document-aware, a doc id of its
// own); with context parallelism its document pieces are padded as any row's.
//
// With document awareness (Options::document_aware), a row also gets doc_ids (a running
// document index over the input positions, incremented after each end-of-text token),
// position_ids (restarting at 0 at each document start), and y = ignore_index where the
// label belongs to another document than its input position (right after an end-of-text).
// A file with an index of its documents (a Megatron .idx: StreamFile::document_starts)
// takes its boundaries from the index instead, and its end-of-text tokens are plain
// tokens (a file without one needs the end-of-text id: check_document_boundaries); with Megatron's --append-eod each
// document ends with one, and both give the same rows.
//
// An int32 file's tokens (a Megatron .bin whose .idx says int32) are read as their uint32
// bits; a row holding a negative one is refused (Error(format) naming the file and the
// token), so no id outside [0, 2^31) reaches a batch.
//
// Thread-safety: decode() may run concurrently on different slots.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/batch_source.hpp"
#include "dataset/token_stream.hpp"
#include "modes/epoch_orders.hpp"
#include "modes/next_token_run.hpp"
#include "modes/sampled_row_source.hpp"

namespace tokenfeed {

class TokenStreamBatchSource final : public SampledRowSource {
 public:
  struct Options {
    std::size_t block_size = 0;
    SamplingMode mode = SamplingMode::random;
    bool document_aware = false;               // the document fields
    std::optional<std::int64_t> eos_token_id;  // their boundaries in files without document starts
    std::int64_t ignore_index = -100;
    // Fill token_weights and cu_seqlens, and position_ids without the document fields.
    // Must match the pool's shape.
    bool contract_fields = true;
    // Context parallelism, document-aware only: each document piece of a row padded to a
    // multiple of `sequence_multiple` positions (2·cp; 1: none) with `pad_token_id`
    // (pad_documents).
    std::size_t sequence_multiple = 1;
    std::int64_t pad_token_id = 0;
    // Random mode under a sequence-length schedule: every block size a batch may have
    // (block_size among them). Empty: block_size only.
    std::vector<std::size_t> block_sizes;
    // Epoch mode under a sequence-length schedule: the sampled ids are pieces of units of
    // this many tokens (the windows of the longest block size; EpisodeSampler::Settings::
    // unit_tokens). 0: the ids are windows of the batch's block size.
    std::size_t unit_tokens = 0;
  };

  // What the sampler draws from: windows per epoch (epoch mode) or valid window starts
  // (random mode), over all files.
  static std::uint64_t sample_count(const TokenStreamSplit& split, std::size_t block_size, SamplingMode mode);

  // For document-aware rows: every file of `split` has document starts, or `eos_token_id`
  // is set. Throws Error(config) naming the first file that has neither.
  static void check_document_boundaries(const TokenStreamSplit& split, const std::optional<std::int64_t>& eos_token_id,
                                        const std::string& where_eos);

  // REQUIRES: split and orders (and its sampler) outlive the source; the sampler draws
  // from sample_count().
  TokenStreamBatchSource(const TokenStreamSplit& split, const EpochOrders& orders, Options options);

  void check_intact() const override { split_.check_intact(); }
  // Random mode: the valid window starts of windows of `cols` + 1 tokens (cols one of the
  // block sizes given).
  std::uint64_t ids_at_length(std::size_t cols) const noexcept override;
  // Hints the CPU to load the window of sample `id`.
  void prefetch_id(std::int64_t id) const noexcept override;

  // The file and in-file token offset where sample `id` starts, and the id recorded in
  // window_ids (the global window number in epoch mode, the global token offset in random
  // mode).
  struct Location {
    std::size_t file = 0;
    std::uint64_t offset = 0;
    std::int64_t window_id = 0;
  };
  // Sample `id` of windows of `block_size` (Options::block_size, or one of block_sizes).
  Location locate(std::uint64_t id, std::size_t block_size) const noexcept;
  Location locate(std::uint64_t id) const noexcept { return locate(id, options_.block_size); }

 private:
  // Per block size: per file, the global id of its first sample.
  struct FirstSamples {
    std::size_t block_size = 0;
    std::vector<std::uint64_t> first;
    std::uint64_t total = 0;  // samples of all files at this block size
  };
  const TokenStreamSplit& split_;
  Options options_;
  bool ranges_ = false;                      // the split is runs of documents chosen by hash: one stream over them
  std::vector<FirstSamples> first_samples_;  // options_.block_size's first

  const std::vector<std::uint64_t>& first_samples(std::size_t block_size) const noexcept;
  // With ranges_: tokens [offset, offset + count) of the concatenation of the runs into
  // `out`; an int32 file's negative id is Error(format) naming the file and the token.
  void read_ranges(std::uint64_t offset, std::size_t count, std::int64_t* out) const;
  // With ranges_: the window of `T` inputs at `loc` (an offset into the concatenation), as
  // write_window.
  void write_ranges_window(const Location& loc, std::size_t T, const NextTokenFields& fields) const;
  // Where sample `id` of a batch of block size `T` starts, and its inputs that have a
  // target (T, or fewer for a partial row).
  std::pair<Location, std::size_t> locate_row(std::int64_t id, std::size_t T) const noexcept;
  // The token at `loc` (an int32 file's negative one is Error(format), as read_ranges).
  std::int64_t read_token(const Location& loc) const;
  // Writes the window at `loc` (`T` inputs and their targets) into `fields`.
  void write_window(const Location& loc, std::size_t T, const NextTokenFields& fields) const noexcept;
  // The window of `T` inputs at `loc` of an int32 file, written to x and y (unmasked):
  // throws Error(format) naming the file and the token when one of its ids is negative.
  void check_signed_window(const Location& loc, std::size_t T, const std::int64_t* x, const std::int64_t* y) const;
  void decode_id(std::int64_t id, detail::BatchSlot& slot, std::size_t r) const override;
  // The contract's view of a document-aware row whose fields are written (the first `real`
  // positions, the rest padding): the weights and one sequence per document piece;
  // returns the row's real positions.
  std::size_t finish_documents(detail::BatchSlot& slot, std::size_t r, std::size_t real) const;
};

// Context parallelism's padding of a document-aware row of `cols` positions whose fields
// are written (x, y, doc_ids, position_ids; apply_document_boundaries): each document
// piece is moved right to start where the previous one's padded span ends, and padded to
// a multiple of `multiple` (pad in x, ignore_index in y, the piece's doc id, its positions
// continuing); the window's tokens that no longer fit in the row are dropped (the piece
// that reaches the row's end is cut there, and the rest of the window is not used), so
// the row ends full. Only the first `real_cols` positions are the window's (a partial
// row's, whose padding the caller writes after the last padded piece); the row then need
// not end full. Returns each kept piece's (real, padded) lengths, in order.
// REQUIRES: cols a multiple of `multiple`, real_cols <= cols.
struct PaddedPiece {
  std::size_t real = 0, padded = 0;
};
std::vector<PaddedPiece> pad_documents(std::int64_t* x, std::int64_t* y, std::int32_t* doc_ids,
                                       std::int32_t* position_ids, std::size_t cols, std::size_t multiple,
                                       std::int64_t pad_token_id, std::int64_t ignore_index,
                                       std::size_t real_cols = SIZE_MAX);

// Fills doc_ids and position_ids for one row of `cols` inputs and masks y where the label
// crosses a document boundary. Exposed for tests.
void apply_document_boundaries(const std::int64_t* x, std::int64_t* y, std::int32_t* doc_ids,
                               std::int32_t* position_ids, std::size_t cols, std::int64_t eos_token_id,
                               std::int64_t ignore_index) noexcept;

// The same fields for the row of `cols` inputs starting at token `offset` of a file whose
// documents start where `starts` says: a document starting at token offset + i, for
// 0 < i <= cols, masks y[i - 1] (its first token, the label of the previous document's
// last input) with ignore_index and, for i < cols, starts a new doc id at input i.
void apply_document_starts(const DocumentStarts& starts, std::uint64_t offset, std::int64_t* y, std::int32_t* doc_ids,
                           std::int32_t* position_ids, std::size_t cols, std::int64_t ignore_index) noexcept;

}  // namespace tokenfeed
