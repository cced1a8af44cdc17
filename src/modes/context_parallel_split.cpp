#include "modes/context_parallel_split.hpp"

#include <algorithm>
#include <utility>

namespace tokenfeed {
namespace {

// Where a chunk of the whole rows goes in the share: `count` positions from flattened
// position `from` of the whole rows to flattened position `to` of the share.
struct ChunkCopy {
  std::size_t from = 0, to = 0, count = 0;
};

// Calls copy(ChunkCopy) for every chunk `share` keeps of the span [start, start + n) of
// row `row` (n a multiple of 2·cp), which lands at `start / cp` of the row's share.
template <typename Copy>
void for_kept_chunks(std::size_t row, std::size_t whole_cols, std::size_t start, std::size_t n,
                     const ContextParallelShare& share, Copy&& copy) {
  const std::size_t cp = share.size;
  const std::size_t chunk = n / (2 * cp);
  const std::size_t from = row * whole_cols + start;
  const std::size_t to = row * (whole_cols / cp) + start / cp;
  copy(ChunkCopy{from + share.rank * chunk, to, chunk});
  copy(ChunkCopy{from + (2 * cp - 1 - share.rank) * chunk, to + chunk, chunk});
}

// Every chunk the share keeps, in order: per row, its sequences' (or the whole row's).
std::vector<ChunkCopy> kept_chunks(const detail::BatchSlot& whole, std::size_t rows, std::size_t whole_cols,
                                   const ContextParallelShare& share) {
  std::vector<ChunkCopy> chunks;
  const auto add = [&chunks](const ChunkCopy& c) { chunks.push_back(c); };
  if (!share.by_sequences) {
    for (std::size_t r = 0; r < rows; ++r) for_kept_chunks(r, whole_cols, 0, whole_cols, share, add);
    return chunks;
  }
  const std::vector<std::int32_t>& offsets =
      whole.cu_seqlens_padded.empty() ? whole.cu_seqlens : whole.cu_seqlens_padded;
  for (std::uint32_t i = 0; i < whole.num_sequences; ++i) {
    const auto begin = static_cast<std::size_t>(offsets[i]);
    const auto end = static_cast<std::size_t>(offsets[i + 1]);
    const std::size_t row = begin / whole_cols;  // a sequence never crosses a row's end
    for_kept_chunks(row, whole_cols, begin - row * whole_cols, end - begin, share, add);
  }
  return chunks;
}

template <typename T>
void copy_field(const std::vector<T>& from, std::vector<T>& to, const std::vector<ChunkCopy>& chunks) {
  if (to.empty() || from.empty()) return;
  for (const ChunkCopy& c : chunks) std::copy_n(from.data() + c.from, c.count, to.data() + c.to);
}

}  // namespace

void split_for_context_parallel(const detail::BatchSlot& whole, std::size_t whole_cols,
                                const ContextParallelShare& share, detail::BatchSlot& out) {
  const std::size_t rows = whole.rows;
  out.begin_batch(whole.step, whole.epoch, whole.batch_in_epoch, whole.real_rows, rows, whole_cols / share.size);
  out.row_in_epoch = whole.row_in_epoch;
  out.next_epoch = whole.next_epoch;
  out.next_row_in_epoch = whole.next_row_in_epoch;
  out.real_positions = whole.real_positions;  // the whole rows' bookkeeping
  std::copy(whole.episode_ids.begin(), whole.episode_ids.end(), out.episode_ids.begin());
  if (!out.source_ids.empty()) std::copy(whole.source_ids.begin(), whole.source_ids.end(), out.source_ids.begin());
  out.num_sequences = whole.num_sequences;
  out.max_seqlen = whole.max_seqlen;
  if (!out.cu_seqlens.empty()) std::copy_n(whole.cu_seqlens.begin(), whole.num_sequences + 1, out.cu_seqlens.begin());
  if (!out.cu_seqlens_padded.empty()) {
    std::copy_n(whole.cu_seqlens_padded.begin(), whole.num_sequences + 1, out.cu_seqlens_padded.begin());
  }
  if (!out.segments.empty()) {
    std::copy_n(whole.segments.begin(), whole.segment_count, out.segments.begin());
    out.segment_count = whole.segment_count;
  }
  // One pass per field, over the chunks the share keeps.
  const std::vector<ChunkCopy> chunks = kept_chunks(whole, rows, whole_cols, share);
  copy_field(whole.x, out.x, chunks);
  copy_field(whole.y, out.y, chunks);
  copy_field(whole.labels, out.labels, chunks);
  copy_field(whole.token_weights, out.token_weights, chunks);
  copy_field(whole.mask, out.mask, chunks);
  copy_field(whole.position_ids, out.position_ids, chunks);
  copy_field(whole.doc_ids, out.doc_ids, chunks);
}

ContextParallelSplitSource::ContextParallelSplitSource(BatchSource& whole, const detail::BatchShape& whole_shape,
                                                       ContextParallelShare share)
    : whole_(whole), whole_shape_(whole_shape), share_(share) {}

ContextParallelSplitSource::ContextParallelSplitSource(std::unique_ptr<BatchSource> whole,
                                                       const detail::BatchShape& whole_shape,
                                                       ContextParallelShare share)
    : owned_(std::move(whole)), whole_(*owned_), whole_shape_(whole_shape), share_(share) {}

void ContextParallelSplitSource::decode(const BatchPlan& plan, detail::BatchSlot& slot) const {
  std::unique_ptr<detail::BatchSlot> scratch;
  {
    MutexLock lock(mutex_);
    if (!spare_.empty()) {
      scratch = std::move(spare_.back());
      spare_.pop_back();
    }
  }
  if (!scratch) scratch = detail::make_slot(whole_shape_);
  // The scratch slot goes back to the spares whether or not the decode throws.
  struct GiveBack {
    const ContextParallelSplitSource& source;
    std::unique_ptr<detail::BatchSlot>& scratch;
    ~GiveBack() {
      MutexLock lock(source.mutex_);
      source.spare_.push_back(std::move(scratch));
    }
  } give_back{*this, scratch};
  whole_.decode(plan, *scratch);
  split_for_context_parallel(*scratch, scratch->cols, share_, slot);  // the batch's cols
}

}  // namespace tokenfeed
