#include "pipeline/batch_pool.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace detail {

namespace {

// Returns the whole pages of bytes [keep, total) of the buffer at `data` to the kernel.
void release_pages(const void* data, std::size_t keep, std::size_t total) noexcept {
  static const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t begin = (base + keep + page - 1) / page * page;
  const std::uintptr_t end = (base + total) / page * page;
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

template <typename T>
void release_cells(std::vector<T>& buffer, std::size_t cells) noexcept {
  if (buffer.size() > cells) release_pages(buffer.data(), cells * sizeof(T), buffer.size() * sizeof(T));
}

}  // namespace

void BatchSlot::release_beyond(std::size_t cells) noexcept {
  release_cells(x, cells);
  release_cells(y, cells);
  release_cells(mask, cells);
  release_cells(doc_ids, cells);
  release_cells(labels, cells);
  release_cells(token_weights, cells);
  release_cells(position_ids, cells);
  release_cells(log_probs, cells);
  // Segments: at most one per position of the whole rows (x holds this rank's share).
  if (!x.empty()) release_cells(segments, segments.size() / x.size() * cells);
  resident_cells = cells;
}

std::unique_ptr<BatchSlot> make_slot(const BatchShape& shape) {
  const std::size_t cells = shape.rows * shape.cols;
  auto slot = std::make_unique<BatchSlot>();
  slot->rows = shape.rows;
  slot->cols = shape.cols;
  slot->resident_cells = cells;
  slot->x.resize(cells);
  if (!shape.y_is_labels) slot->y.resize(cells);
  slot->episode_ids.resize(shape.rows);
  if (shape.with_mask && !shape.mask_is_weights) slot->mask.resize(cells);
  if (shape.with_document_fields) slot->doc_ids.resize(cells);
  if (shape.contract_fields || shape.y_is_labels) slot->labels.resize(cells);
  if (shape.contract_fields) slot->token_weights.resize(cells);
  if (shape.contract_fields || shape.with_document_fields) slot->position_ids.resize(cells);
  // The sequences and segments are the whole rows' (BatchShape::context_parallel).
  const std::size_t sequences = shape.rows * (shape.full_cols() + 1) + 1;
  if (shape.contract_fields) slot->cu_seqlens.resize(sequences);
  if (shape.contract_fields && shape.padded_sequences) slot->cu_seqlens_padded.resize(sequences);
  if (shape.packed) slot->segments.resize(shape.rows * shape.full_cols());
  if (shape.rl_fields) {
    slot->log_probs.resize(cells);
    slot->rewards.resize(shape.rows * (shape.cols + 1));
    slot->group_ids.resize(shape.rows * (shape.cols + 1));
  }
  if (shape.with_source_ids) slot->source_ids.resize(shape.rows);
  return slot;
}

BatchPool::BatchPool(std::size_t slots, BatchShape shape, std::string split, std::size_t capacity)
    : shape_(shape), split_(std::move(split)), capacity_(std::max(slots, capacity)) {
  slot_bytes_ = bytes_per_slot(shape_);
  slots_.reserve(capacity_);
  free_.reserve(capacity_);
  grow_to(slots);
}

std::uint64_t BatchPool::bytes_per_slot(const BatchShape& shape) noexcept {
  // The sizes make_slot allocates, computed with saturating arithmetic, so that an absurd
  // shape is measured rather than allocated (or wrapped to a small figure).
  const auto mul = [](std::uint64_t a, std::uint64_t b) {
    std::uint64_t r = 0;
    return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
  };
  const auto add = [](std::uint64_t a, std::uint64_t b) {
    std::uint64_t r = 0;
    return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
  };
  const std::uint64_t cells = mul(shape.rows, shape.cols);
  std::uint64_t bytes = mul(cells, sizeof(std::int64_t));                        // x
  if (!shape.y_is_labels) bytes = add(bytes, mul(cells, sizeof(std::int64_t)));  // y
  bytes = add(bytes, mul(shape.rows, sizeof(std::int64_t)));                     // episode_ids
  if (shape.with_mask && !shape.mask_is_weights) bytes = add(bytes, mul(cells, sizeof(float)));
  if (shape.with_document_fields) bytes = add(bytes, mul(cells, sizeof(std::int32_t)));
  if (shape.contract_fields || shape.y_is_labels) bytes = add(bytes, mul(cells, sizeof(std::int64_t)));
  if (shape.contract_fields) bytes = add(bytes, mul(cells, sizeof(float)));
  if (shape.contract_fields || shape.with_document_fields) bytes = add(bytes, mul(cells, sizeof(std::int32_t)));
  const std::uint64_t full_cols = mul(shape.cols, shape.context_parallel);
  const std::uint64_t sequences = add(mul(shape.rows, add(full_cols, 1)), 1);
  if (shape.contract_fields) bytes = add(bytes, mul(sequences, sizeof(std::int32_t)));
  if (shape.contract_fields && shape.padded_sequences) bytes = add(bytes, mul(sequences, sizeof(std::int32_t)));
  if (shape.packed) bytes = add(bytes, mul(mul(shape.rows, full_cols), sizeof(PackedSegment)));
  return bytes;
}

void BatchPool::grow_to(std::size_t slots) {
  slots = std::min(slots, capacity_);
  while (size() < slots) {
    std::unique_ptr<BatchSlot> slot = make_slot(shape_);  // allocated outside the lock
    MutexLock lock(free_mutex_);
    free_.push_back(slot.get());  // never reallocates: capacity reserved for capacity_ slots
    slots_.push_back(std::move(slot));
    size_.store(slots_.size(), std::memory_order_release);
  }
}

BatchSlot* BatchPool::acquire(int decoder) noexcept {
  MutexLock lock(free_mutex_);
  if (free_.empty()) return nullptr;
  auto it = free_.end() - 1;
  if (decoder >= 0) {
    const auto mine =
        std::find_if(free_.rbegin(), free_.rend(), [&](const BatchSlot* s) { return s->decoder == decoder; });
    if (mine != free_.rend()) it = std::prev(mine.base());
  }
  BatchSlot* slot = *it;
  free_.erase(it);  // keeps the others in release order; the list holds a few dozen at most
  if (decoder >= 0) slot->decoder = decoder;
  return slot;
}

void BatchPool::release(BatchSlot* slot) noexcept {
  {
    MutexLock lock(free_mutex_);
    slot->error = nullptr;
    free_.push_back(slot);  // never reallocates: capacity reserved for capacity_ slots
  }
}

Batch BatchPool::make_batch(BatchSlot* slot) {
  held_.fetch_add(1, std::memory_order_acq_rel);
  return Batch(shared_from_this(), slot);
}

}  // namespace detail

Batch::Batch() noexcept = default;
Batch::Batch(std::shared_ptr<detail::BatchPool> pool, detail::BatchSlot* slot) noexcept
    : pool_(std::move(pool)), slot_(slot) {}
Batch::~Batch() { release(); }
Batch::Batch(Batch&& other) noexcept : pool_(std::move(other.pool_)), slot_(std::exchange(other.slot_, nullptr)) {}
Batch& Batch::operator=(Batch&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::move(other.pool_);
    slot_ = std::exchange(other.slot_, nullptr);
  }
  return *this;
}

void Batch::release() noexcept {
  if (slot_ != nullptr) {
    pool_->release(std::exchange(slot_, nullptr));
    pool_->held_.fetch_sub(1, std::memory_order_acq_rel);
  }
  pool_.reset();
}

std::string_view Batch::split() const noexcept { return slot_ ? std::string_view(pool_->split()) : std::string_view(); }
std::uint64_t Batch::step() const noexcept { return slot_ ? slot_->step : 0; }
std::uint64_t Batch::epoch() const noexcept { return slot_ ? slot_->epoch : 0; }
std::uint64_t Batch::batch_in_epoch() const noexcept { return slot_ ? slot_->batch_in_epoch : 0; }
std::size_t Batch::rows() const noexcept { return slot_ ? slot_->rows : 0; }
std::size_t Batch::cols() const noexcept { return slot_ ? slot_->cols : 0; }
std::size_t Batch::real_rows() const noexcept { return slot_ ? static_cast<std::size_t>(slot_->real_rows) : 0; }
bool Batch::has_field(BatchField field) const noexcept { return slot_ != nullptr && pool_->shape().chose(field); }

// Whether a field may be handed out: false for an invalid Batch (its accessors return
// empty); throws for a field Config::fields did not choose, whose memory the decoders may
// have left unwritten.
bool Batch::readable(BatchField field) const {
  if (slot_ == nullptr) return false;
  if (pool_->shape().chose(field)) return true;
  const std::string chosen = batch_field_list(pool_->shape().fields);
  const std::string name(kBatchFieldNames[static_cast<std::size_t>(field)]);
  throw Error(ErrorKind::usage, "batch field '" + name + "' of split '" + pool_->split() +
                                    "' was not chosen: config key 'fields' is '" + chosen + "'; add " + name +
                                    " to it to read this field");
}

namespace {
// The first `n` elements of a slot's buffer (all of it when shorter: an unused, empty one).
template <typename T>
std::span<const T> first(const std::vector<T>& buffer, std::size_t n) noexcept {
  return std::span<const T>(buffer.data(), std::min(n, buffer.size()));
}
}  // namespace

// A buffer of rows x cols cells holds this batch's in its first rows() x cols() (fewer rows
// than the pool's shape under a batch-size schedule).
std::size_t Batch::cells() const noexcept { return slot_->rows * slot_->cols; }

std::span<const std::int64_t> Batch::x() const {
  return readable(BatchField::x) ? first(slot_->x, cells()) : std::span<const std::int64_t>();
}
std::span<const std::int64_t> Batch::y() const {
  if (!readable(BatchField::y)) return {};
  return first(pool_->shape().y_is_labels ? slot_->labels : slot_->y, cells());
}
std::span<const float> Batch::mask() const {
  if (!readable(BatchField::mask) || !has_mask()) return {};
  return first(pool_->shape().mask_is_weights ? slot_->token_weights : slot_->mask, cells());
}
bool Batch::has_mask() const noexcept { return slot_ && pool_->shape().with_mask; }
std::span<const std::int64_t> Batch::tokens() const {
  return readable(BatchField::tokens) ? first(slot_->x, cells()) : std::span<const std::int64_t>();
}
std::span<const std::int64_t> Batch::labels() const {
  return readable(BatchField::labels) ? first(slot_->labels, cells()) : std::span<const std::int64_t>();
}
std::span<const float> Batch::token_weights() const {
  return readable(BatchField::token_weights) ? first(slot_->token_weights, cells()) : std::span<const float>();
}
std::span<const std::int32_t> Batch::cu_seqlens() const {
  if (!readable(BatchField::cu_seqlens) || slot_->cu_seqlens.empty()) return {};
  return {slot_->cu_seqlens.data(), slot_->num_sequences + 1};
}
std::size_t Batch::num_sequences() const { return readable(BatchField::cu_seqlens) ? slot_->num_sequences : 0; }
std::size_t Batch::max_seqlen() const { return readable(BatchField::cu_seqlens) ? slot_->max_seqlen : 0; }
std::span<const std::int32_t> Batch::cu_seqlens_padded() const {
  if (!readable(BatchField::cu_seqlens)) return {};
  if (slot_->cu_seqlens_padded.empty()) return cu_seqlens();  // no context-parallel padding: the same
  return {slot_->cu_seqlens_padded.data(), slot_->num_sequences + 1};
}
std::span<const PackedSegment> Batch::segments() const noexcept {
  return slot_ ? std::span<const PackedSegment>(slot_->segments.data(), slot_->segment_count)
               : std::span<const PackedSegment>();
}
std::size_t Batch::real_positions() const noexcept { return slot_ ? static_cast<std::size_t>(slot_->real_positions) : 0; }
std::span<const std::int64_t> Batch::episode_ids() const noexcept {
  return slot_ ? first(slot_->episode_ids, slot_->rows) : std::span<const std::int64_t>();
}
std::span<const std::int32_t> Batch::doc_ids() const noexcept {
  return slot_ ? first(slot_->doc_ids, cells()) : std::span<const std::int32_t>();
}
std::span<const std::int32_t> Batch::position_ids() const {
  return readable(BatchField::position_ids) ? first(slot_->position_ids, cells()) : std::span<const std::int32_t>();
}
std::span<const float> Batch::log_probs() const noexcept {
  return slot_ && slot_->log_probs_given ? first(slot_->log_probs, cells()) : std::span<const float>();
}
std::span<const float> Batch::rewards() const noexcept {
  return slot_ && !slot_->rewards.empty() ? std::span<const float>(slot_->rewards.data(), slot_->num_sequences)
                                          : std::span<const float>();
}
std::span<const std::int64_t> Batch::group_ids() const noexcept {
  return slot_ && !slot_->group_ids.empty()
             ? std::span<const std::int64_t>(slot_->group_ids.data(), slot_->num_sequences)
             : std::span<const std::int64_t>();
}
std::span<const std::int32_t> Batch::source_ids() const noexcept {
  return slot_ ? first(slot_->source_ids, slot_->rows) : std::span<const std::int32_t>();
}
double Batch::wait_us() const noexcept { return slot_ ? slot_->wait_us : 0.0; }

}  // namespace tokenfeed
