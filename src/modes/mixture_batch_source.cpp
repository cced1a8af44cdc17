#include "modes/mixture_batch_source.hpp"

#include <algorithm>
#include <memory>

#include "util/checked_math.hpp"

namespace tokenfeed {
namespace {

struct MixtureRow {
  std::uint32_t source = 0;
  std::int64_t id = -1;  // a sampled source's row k, by its id (SampledRowSource::row_id)
  BatchPlan plan;        // another source's batch k (its row k)
};
using MixturePlan = std::vector<MixtureRow>;

}  // namespace

MixtureBatchSource::MixtureBatchSource(std::vector<Member> members, const MixtureSchedule& schedule,
                                       detail::BatchShape shape, Options options)
    : members_(std::move(members)), schedule_(&schedule), shape_(shape), options_(options) {
  epoch_starts_.resize(members_.size(), std::vector<std::uint64_t>{0});
}

std::uint64_t MixtureBatchSource::epoch_of(std::size_t source, std::uint64_t k) const {
  const Member& m = members_[source];
  if (m.epochs == Epochs::equal) return k / m.source->batches_in_epoch(0);
  MutexLock lock(epochs_mutex_);
  std::vector<std::uint64_t>& starts = epoch_starts_[source];
  while (starts.back() <= k) {
    starts.push_back(starts.back() + m.source->batches_in_epoch(starts.size() - 1));
  }
  // starts[e] <= k < starts[e + 1]
  return static_cast<std::uint64_t>(std::upper_bound(starts.begin(), starts.end(), k) - starts.begin()) - 1;
}

std::uint64_t MixtureBatchSource::epoch_first_row(std::size_t source, std::uint64_t epoch) const {
  const Member& m = members_[source];
  if (m.epochs == Epochs::equal) return epoch * m.source->batches_in_epoch(0);
  MutexLock lock(epochs_mutex_);
  std::vector<std::uint64_t>& starts = epoch_starts_[source];
  while (starts.size() <= epoch) starts.push_back(starts.back() + m.source->batches_in_epoch(starts.size() - 1));
  return starts[epoch];
}

BatchPlan MixtureBatchSource::plan(std::uint64_t step) {
  // This rank's rows of the step's global batch, which follows the rows of every step
  // before (the global batch fits 64 bits; the rows before a step may not).
  const ShapeSchedule& steps = schedule_->steps();
  const std::uint64_t rows_here = steps.global_batch_at(step) / options_.world_size;
  auto rows = std::make_shared<MixturePlan>(rows_here);
  const std::uint64_t first = checked_sum(steps.rows_before(step), options_.rank * rows_here, "the rank's first row");
  // A sequence-length schedule's length for this step (0: none), which a token stream's
  // random draw depends on.
  const auto cols = static_cast<std::size_t>(steps.block_size_at(step));
  for (std::uint64_t r = 0; r < rows_here; ++r) {
    const MixtureSchedule::Pick pick = schedule_->pick(first + r);
    Member& m = members_[pick.source];
    (*rows)[r].source = pick.source;
    if (m.sampled != nullptr) {
      (*rows)[r].id = m.sampled->row_id(pick.index, cols);
      continue;
    }
    std::uint64_t epoch = 0;
    std::uint64_t in_epoch = pick.index;
    if (m.epochs != Epochs::none) {
      epoch = epoch_of(pick.source, pick.index);
      in_epoch = pick.index - epoch_first_row(pick.source, epoch);
    }
    // Sources whose batch k follows from k alone ignore the seek; packed epochs need it
    // (a source's batch is one row here, so its row in the epoch is its batch in the epoch).
    m.source->seek(SplitPosition{pick.index, epoch, in_epoch, in_epoch});
    (*rows)[r].plan = m.source->plan(pick.index);
  }
  BatchPlan plan;
  plan.step = step;
  plan.epoch = 0;
  plan.batch_in_epoch = step;
  plan.mode_data = std::move(rows);
  return plan;
}

void MixtureBatchSource::decode(const BatchPlan& batch_plan, detail::BatchSlot& slot) const {
  const MixturePlan& rows = batch_plan.mode_data_as<MixturePlan>();
  // The step's block size: a sequence-length schedule's (its sources keep their rows at any
  // stage's length), else the shape's.
  const std::uint64_t scheduled = schedule_->steps().block_size_at(batch_plan.step);
  const std::size_t T = scheduled != 0 ? static_cast<std::size_t>(scheduled) : shape_.cols;
  slot.begin_batch(batch_plan.step, 0, batch_plan.step, rows.size(), rows.size(), T);
  std::vector<std::unique_ptr<detail::BatchSlot>> scratch;  // sized when a source needs one
  // Hints ahead of the rows, as a single source's decode gives them: the records of the
  // next few rows, the data of the next one.
  const auto prefetch_record = [&](std::size_t r) {
    if (r < rows.size() && rows[r].id >= 0) members_[rows[r].source].sampled->prefetch_record_id(rows[r].id);
  };
  for (std::size_t r = 0; r < SampledRowSource::kRecordsAhead; ++r) prefetch_record(r);
  for (std::size_t r = 0; r < rows.size(); ++r) {
    prefetch_record(r + SampledRowSource::kRecordsAhead);
    const std::uint32_t i = rows[r].source;
    const Member& m = members_[i];
    slot.source_ids[r] = static_cast<std::int32_t>(i);
    const auto at = static_cast<std::ptrdiff_t>(r * T);
    if (r + 1 < rows.size() && rows[r + 1].id >= 0) members_[rows[r + 1].source].sampled->prefetch_id(rows[r + 1].id);
    bool in_place = true;
    if (m.sampled != nullptr) {
      m.sampled->decode_row_id(rows[r].id, slot, r);
    } else {
      in_place = m.source->decode_row(rows[r].plan, slot, r);
    }
    if (in_place) {
      // In place; what the source's own shape lacks is completed here.
      if (!slot.y.empty() && m.shape.y_is_labels) std::copy_n(slot.labels.begin() + at, T, slot.y.begin() + at);
      if (!slot.doc_ids.empty() && !m.shape.with_document_fields) std::fill_n(slot.doc_ids.begin() + at, T, 0);
      continue;
    }
    // Else decoded in a slot of the source's own shape and copied.
    if (scratch.empty()) scratch.resize(members_.size());
    if (!scratch[i]) scratch[i] = detail::make_slot(m.shape);
    detail::BatchSlot& one = *scratch[i];
    m.source->decode(rows[r].plan, one);
    std::copy_n(one.x.begin(), T, slot.x.begin() + at);
    if (!slot.y.empty()) {
      // The row's own y: the raw next tokens of an episode row, the labels of a packed row
      // (whose mode has y == labels).
      const std::vector<std::int64_t>& y = one.y.empty() ? one.labels : one.y;
      std::copy_n(y.begin(), T, slot.y.begin() + at);
    }
    std::copy_n(one.labels.begin(), T, slot.labels.begin() + at);
    std::copy_n(one.token_weights.begin(), T, slot.token_weights.begin() + at);
    std::copy_n(one.position_ids.begin(), T, slot.position_ids.begin() + at);
    if (!slot.doc_ids.empty()) {
      if (one.doc_ids.empty()) {
        std::fill_n(slot.doc_ids.begin() + at, T, 0);
      } else {
        std::copy_n(one.doc_ids.begin(), T, slot.doc_ids.begin() + at);
      }
    }
    slot.episode_ids[r] = one.episode_ids[0];
    slot.real_positions += one.real_positions;
    for (std::uint32_t q = 0; q < one.num_sequences; ++q) {
      const auto real = static_cast<std::size_t>(one.cu_seqlens[q + 1] - one.cu_seqlens[q]);
      slot.add_sequence(real, one.cu_seqlens_padded.empty()
                                  ? real
                                  : static_cast<std::size_t>(one.cu_seqlens_padded[q + 1] - one.cu_seqlens_padded[q]));
    }
    if (!slot.segments.empty()) {
      for (std::size_t q = 0; q < one.segment_count; ++q) {
        PackedSegment segment = one.segments[q];
        segment.row = static_cast<std::uint32_t>(r);
        slot.segments[slot.segment_count++] = segment;
      }
    }
  }
}

void MixtureBatchSource::will_need(const BatchPlan& batch_plan) const noexcept {
  for (const MixtureRow& row : batch_plan.mode_data_as<MixturePlan>()) {
    const Member& m = members_[row.source];
    if (m.sampled == nullptr) {
      m.source->will_need(row.plan);
    } else if (row.id >= 0) {
      m.sampled->will_need_id(row.id);
    }
  }
}

void MixtureBatchSource::check_intact() const {
  for (const Member& m : members_) m.source->check_intact();
}

}  // namespace tokenfeed
