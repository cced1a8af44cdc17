#include "sampling/episode_sampler.hpp"

#include <algorithm>

#include "util/checked_math.hpp"
#include "util/hash.hpp"
#include "sampling/numpy_random.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

EpisodeSampler::EpisodeSampler(IdRange range, Settings settings)
    : EpisodeSampler(IdList::iota(range.count), std::move(settings)) {}

EpisodeSampler::EpisodeSampler(std::shared_ptr<const DocumentPieces> pieces, Settings settings)
    : EpisodeSampler(pieces->kept(), std::move(settings)) {
  pieces_ = std::move(pieces);
  const bool tokens = pieces_->numbering() == DocumentPieces::Numbering::tokens;
  // Random draws at each length: a schedule's stages, or a mixture's (draw_block_sizes).
  const bool draws =
      settings_.mode == SamplingMode::random && tokens && (settings_.schedule || !settings_.draw_block_sizes.empty());
  // Pieces numbered by tokens without a schedule: the documents are the ids (the packer cuts).
  documents_cut_by_packer_ = tokens && !settings_.schedule && !draws;
  count_ = documents_cut_by_packer_ ? kept_.size() : pieces_->size();
  count_batches();
  if (!draws) return;
  // One table of the pieces per distinct length drawn at (the key's too without a schedule:
  // a plan of the source's own, cols 0, draws at it).
  std::vector<std::uint64_t> lengths = settings_.draw_block_sizes;
  if (settings_.schedule) {
    for (const ShapeSchedule::Stage& stage : settings_.schedule->stages()) lengths.push_back(stage.block_size);
  } else {
    lengths.push_back(pieces_->S() - 1);
  }
  for (const std::uint64_t T : lengths) {
    const bool known = std::any_of(tables_.begin(), tables_.end(),
                                   [T](const DocumentPieces::PieceTable& t) { return t.block_size == T; });
    if (!known) tables_.push_back(pieces_->table_at(T));
  }
}

const DocumentPieces::PieceTable& EpisodeSampler::table_at(std::uint64_t T) const noexcept {
  // A plan without a length of its own (cols 0: no schedule) draws at the key's.
  const std::uint64_t length = T != 0 ? T : pieces_->S() - 1;
  for (const DocumentPieces::PieceTable& table : tables_) {
    if (table.block_size == length) return table;
  }
  return tables_.front();  // unreachable: every length drawn at has its table
}

EpisodeSampler::EpisodeSampler(IdList kept, Settings settings)
    : kept_(std::move(kept)), count_(kept_.size()), settings_(std::move(settings)) {
  count_batches();
  Hasher key;
  key.add(std::uint64_t{settings_.seed});
  key.add(std::string_view(settings_.split));
  random_key_ = key.digest();
}

void EpisodeSampler::count_batches() {
  // A wrapped product would be 0 (a division by zero) or a wrong order: refused.
  const std::uint64_t global_batch = checked_product(settings_.batch_size, settings_.world_size,
                                                     "batch_size x world_size of split '" + settings_.split + "'");
  if (settings_.mode == SamplingMode::epoch) {
    batches_per_epoch_ = count_ / global_batch + (!settings_.drop_last && count_ % global_batch != 0 ? 1 : 0);
  }
  scheduled_.reset();
  cut_.reset();
  if (settings_.schedule && settings_.mode == SamplingMode::epoch && pieces_ &&
      pieces_->numbering() == DocumentPieces::Numbering::tokens) {
    const auto rows_at = [this](std::uint64_t T) { return pieces_->rows_at(T); };
    short_stage_ = CutEpochs::first_stage_short(*settings_.schedule, settings_.drop_last, rows_at);
    if (short_stage_) {
      batches_per_epoch_ = 0;  // some stage never forms a batch: refused as a split too small
    } else {
      cut_.emplace(*settings_.schedule, settings_.drop_last, rows_at,
                   [this](std::uint64_t epoch, std::uint64_t first_row) { return cut_order(epoch, first_row).size(); });
      batches_per_epoch_ = cut_->batches_in_epoch(0);
    }
    return;
  }
  if (settings_.schedule && settings_.mode == SamplingMode::epoch) {
    short_stage_ =
        ScheduledEpochs::first_stage_short(*settings_.schedule, count_, settings_.drop_last, settings_.unit_tokens);
    if (short_stage_) {
      batches_per_epoch_ = 0;  // some stage never forms a batch: refused as a split too small
    } else {
      scheduled_.emplace(*settings_.schedule, count_, settings_.drop_last, settings_.unit_tokens);
      batches_per_epoch_ = scheduled_->batches_in_epoch(0);
    }
  }
}

EpochOrder EpisodeSampler::make_epoch_order(std::uint64_t epoch) const {
  if (cut_) return cut_order(epoch, cut_->first_row_of(epoch));
  if (pieces_ && !documents_cut_by_packer_) return pieces_->expand(kept_order(epoch));
  return kept_order(epoch);
}

IdList EpisodeSampler::kept_order(std::uint64_t epoch) const {
  if (!settings_.shuffle) return kept_;
  const std::uint64_t seed = settings_.seed + epoch;
  if (seed > 0xffffffffULL) {
    throw Error(ErrorKind::config, "epoch_seed + epoch = " + std::to_string(seed) +
                                       " exceeds numpy's seed range [0, 2^32-1] at epoch " + std::to_string(epoch));
  }
  return kept_.gather(numpy_permutation_ids(static_cast<std::uint32_t>(seed), kept_.size()));
}

IdList EpisodeSampler::cut_order(std::uint64_t epoch, std::uint64_t first_row) const {
  const ShapeSchedule& schedule = *settings_.schedule;
  // Row r is global row first_row + r: the block size of the step that holds it.
  return pieces_->cut(kept_order(epoch), [&schedule, first_row](std::uint64_t r) {
    return schedule.block_size_at(schedule.step_of_row(first_row + r));
  });
}

SampledBatch EpisodeSampler::position(std::uint64_t step) const {
  SampledBatch p;
  p.step = step;
  p.rows = rows_at(step);
  p.ids = count_;
  if (settings_.schedule) {
    const std::size_t stage = settings_.schedule->stage_index(step);
    p.cols = settings_.schedule->stages()[stage].block_size;
    if (!settings_.ids_per_stage.empty()) p.ids = settings_.ids_per_stage[stage];
    if (!tables_.empty()) p.ids = table_at(p.cols).size();
  }
  if (settings_.mode == SamplingMode::random) {
    p.batch_in_epoch = step;
    p.first_row =
        settings_.schedule ? settings_.schedule->rows_before(step) : step * settings_.batch_size * settings_.world_size;
    return p;
  }
  if (batches_per_epoch_ == 0) {
    throw Error(ErrorKind::config, "split '" + settings_.split + "' has " + std::to_string(count_) +
                                       " samples, fewer than one global batch, with epoch_drop_last=true");
  }
  if (cut_ || scheduled_) {
    const EpochPoint point = cut_ ? cut_->at(step) : scheduled_->at(step);
    p.epoch = point.epoch;
    p.batch_in_epoch = point.batch_in_epoch;
    p.first_row = point.first_row;
    p.offset = point.offset;
    return p;
  }
  p.epoch = step / batches_per_epoch_;
  p.batch_in_epoch = step % batches_per_epoch_;
  p.first_row = p.batch_in_epoch * settings_.batch_size * settings_.world_size;
  return p;
}

SampledBatch EpisodeSampler::plan(std::uint64_t step) const {
  SampledBatch p = position(step);
  if (settings_.mode == SamplingMode::epoch) p.order = epoch_order(p.epoch);
  return p;
}

std::int64_t EpisodeSampler::row_episode(const SampledBatch& plan, std::uint64_t row) const noexcept {
  if (settings_.mode == SamplingMode::random) {
    // Global row g of the stream, whatever the split of the global batch across ranks.
    const std::uint64_t g = plan.first_row + settings_.rank * plan.rows + row;
    const std::uint64_t u = CounterRng(random_key_).uniform(g, plan.ids);
    // Under a sequence-length curriculum, piece u at the step's length: its row's id.
    if (!tables_.empty()) return static_cast<std::int64_t>(pieces_->row_of(table_at(plan.cols), u));
    return static_cast<std::int64_t>(id_at(u));
  }
  if (settings_.unit_tokens > 0) {
    // A piece of a unit: the unit's id and the piece's offset in one number.
    const EpochPoint at{plan.epoch, plan.batch_in_epoch, plan.first_row, 0, plan.offset};
    const UnitCut cut = scheduled_->cut(at, settings_.rank * plan.rows + row, plan.cols);
    if (cut.unit >= plan.order->size()) return -1;
    return static_cast<std::int64_t>((*plan.order)[cut.unit] * settings_.unit_tokens + cut.offset);
  }
  const std::uint64_t position = plan.first_row + settings_.rank * plan.rows + row;
  if (position >= plan.order->size()) return -1;
  return static_cast<std::int64_t>((*plan.order)[position]);
}

std::uint64_t EpisodeSampler::real_rows(const SampledBatch& plan) const noexcept {
  if (settings_.mode == SamplingMode::random) return plan.rows;
  if (settings_.unit_tokens > 0) {
    const EpochPoint at{plan.epoch, plan.batch_in_epoch, plan.first_row, 0, plan.offset};
    const std::uint64_t left = scheduled_->rows_left(at, plan.cols), before = settings_.rank * plan.rows;
    return left > before ? std::min(plan.rows, left - before) : 0;
  }
  const std::uint64_t first = plan.first_row + settings_.rank * plan.rows;
  const std::uint64_t n = plan.order->size();
  if (first >= n) return 0;
  return std::min(plan.rows, n - first);
}

}  // namespace tokenfeed
