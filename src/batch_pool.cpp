#include "batch_pool.hpp"

#include <utility>

namespace tokenfeed {
namespace detail {

BatchPool::BatchPool(std::size_t slots, BatchShape shape, std::string split)
    : shape_(shape), split_(std::move(split)) {
  const std::size_t cells = shape.rows * shape.cols;
  slots_.reserve(slots);
  free_.reserve(slots);
  for (std::size_t i = 0; i < slots; ++i) {
    auto slot = std::make_unique<BatchSlot>();
    slot->x.resize(cells);
    slot->y.resize(cells);
    slot->episode_ids.resize(shape.rows);
    if (shape.with_mask) slot->mask.resize(cells);
    if (shape.with_document_fields) {
      slot->doc_ids.resize(cells);
      slot->position_ids.resize(cells);
    }
    free_.push_back(slot.get());
    slots_.push_back(std::move(slot));
  }
}

BatchSlot* BatchPool::acquire() noexcept {
  std::lock_guard lock(free_mutex_);
  if (free_.empty()) return nullptr;
  BatchSlot* slot = free_.back();
  free_.pop_back();
  return slot;
}

void BatchPool::release(BatchSlot* slot) noexcept {
  {
    std::lock_guard lock(free_mutex_);
    slot->error = nullptr;
    free_.push_back(slot);  // never reallocates: capacity == number of slots
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
std::size_t Batch::rows() const noexcept { return slot_ ? pool_->shape().rows : 0; }
std::size_t Batch::cols() const noexcept { return slot_ ? pool_->shape().cols : 0; }
std::size_t Batch::real_rows() const noexcept { return slot_ ? static_cast<std::size_t>(slot_->real_rows) : 0; }
std::span<const std::int64_t> Batch::x() const noexcept { return slot_ ? std::span<const std::int64_t>(slot_->x) : std::span<const std::int64_t>(); }
std::span<const std::int64_t> Batch::y() const noexcept { return slot_ ? std::span<const std::int64_t>(slot_->y) : std::span<const std::int64_t>(); }
std::span<const float> Batch::mask() const noexcept { return slot_ ? std::span<const float>(slot_->mask) : std::span<const float>(); }
bool Batch::has_mask() const noexcept { return slot_ && !slot_->mask.empty(); }
std::span<const std::int64_t> Batch::episode_ids() const noexcept {
  return slot_ ? std::span<const std::int64_t>(slot_->episode_ids) : std::span<const std::int64_t>();
}
std::span<const std::int32_t> Batch::doc_ids() const noexcept {
  return slot_ ? std::span<const std::int32_t>(slot_->doc_ids) : std::span<const std::int32_t>();
}
std::span<const std::int32_t> Batch::position_ids() const noexcept {
  return slot_ ? std::span<const std::int32_t>(slot_->position_ids) : std::span<const std::int32_t>();
}
double Batch::wait_us() const noexcept { return slot_ ? slot_->wait_us : 0.0; }

}  // namespace tokenfeed
