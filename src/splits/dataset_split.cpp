#include "splits/dataset_split.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include "splits/resolved_options.hpp"
#include "splits/resume_state.hpp"
#include "splits/shape_plan.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {
DatasetSplit::DatasetSplit(std::string name, const Config& config, std::unique_ptr<SplitData> data,
                           const detail::BatchShape& shape, Description description)
    : LoaderSplit(std::move(name), shape, config),
      config_(config),
      data_(std::move(data)),
      schedule_(shape_schedule_of(config, this->name())),
      description_(std::move(description)) {}

SplitInfo DatasetSplit::info() const {
  SplitInfo info = description_.figures;
  // Packed epochs differ in length: the figure is that of the epoch the next batch is in.
  info.batches_per_epoch = batches_in_epoch_at(next_);
  info.next_epoch = next_.epoch;
  info.next_batch_in_epoch = next_.batch_in_epoch;
  return info;
}

SplitPosition DatasetSplit::resume_position(const SplitPosition& saved) const {
  check_saved(saved);
  if (!unusable().empty()) {
    if (saved.step != 0) {
      throw Error(ErrorKind::state, "invalid resume state: splits." + name() + ".step=" + std::to_string(saved.step) +
                                        " but " + unusable());
    }
    return SplitPosition{};
  }
  return resolve(saved);
}

void DatasetSplit::refuse_batches(const std::string& why, ErrorKind kind) {
  if (name() == "train") throw Error(kind, why);
  log_line(LogLevel::warning, "[tokenfeed] warning: " + why + "; get_batch(\"" + name() + "\") will fail");
  set_unusable(why, kind);
}

void DatasetSplit::check_forms_a_batch() {
  const std::string what = short_of_a_batch();
  if (what.empty()) return;
  const EpisodeSampler& sampler = *data_->sampler;
  if (const auto stage = sampler.short_stage(); stage && sampler.size() > 0) {
    refuse_batches("split '" + name() + "' of '" + config_.dataset_dir.string() + "' has " + what +
                       ", fewer than the global batch of shape_schedule stage " + std::to_string(*stage) + " (" +
                       std::to_string(sampler.settings().schedule->stages()[*stage].global_batch) +
                       " rows) with epoch_drop_last=true; set epoch_drop_last=false or a smaller global_batch_size",
                   ErrorKind::config);
    return;
  }
  // The rows a batch must find: the keys' global batch, or a shape_schedule's largest
  // (packed rows, whose sampler orders episodes and is never scheduled, check that one).
  const std::uint64_t largest = largest_batch_rows(config_, name()) * data_parallel_size(config_);
  const std::string batch =
      largest == global_batch_size(config_)
          ? "one global batch (batch_size x world_size = " + std::to_string(largest) + ")"
          : "the largest global batch of the shape_schedule (" + std::to_string(largest) + " rows)";
  refuse_batches("split '" + name() + "' of '" + config_.dataset_dir.string() + "' has " + what + ", fewer than " +
                     batch + " with epoch_drop_last=true; set epoch_drop_last=false (or " + name() +
                     ".epoch_drop_last) or a smaller batch_size",
                 ErrorKind::config);
}

void DatasetSplit::consumed(const detail::BatchSlot& slot, AuditTrail& audit) {
  // The split's own schedule (sft_packed's sampler orders episodes and is never scheduled).
  announce_shape_stage(slot, config_.block_size, audit);
  if (!slot.global_rows.empty()) {
    const std::vector<std::uint64_t> rows(slot.global_rows.begin(), slot.global_rows.end());
    audit.rows_balanced(
        {name(), slot.step, format_id_list(rows), slot.sliced_cost_max, slot.balanced_cost_max, slot.cost_mean});
  }
  const std::optional<EpochStep> step = advance(slot);
  if (!step) return;
  if (announced_ != slot.epoch) {
    announced_ = slot.epoch;
    announce_epoch(slot, step->batches, audit);
  }
  for (std::uint64_t epoch = slot.epoch; step->last && epoch < next_.epoch; ++epoch) {
    audit.epoch_complete(description_.unit, name(), epoch, epoch_seed_text(config_.epoch_seed, epoch),
                         source_->samples_in_epoch(epoch), data_->sampler->ids_in_epoch(epoch));
  }
}

void DatasetSplit::announce_epoch(const detail::BatchSlot& slot, std::uint64_t batches, AuditTrail& audit) const {
  const EpisodeSampler& sampler = *data_->sampler;
  const bool resumed = slot.batch_in_epoch != 0;
  log_line(LogLevel::debug,
           "[tokenfeed] split=" + name() + " epoch=" + std::to_string(slot.epoch) +
               (resumed ? " resumed_at_batch=" + std::to_string(slot.batch_in_epoch) : std::string()) + " " +
               description_.unit.plural + "=" + std::to_string(sampler.ids_in_epoch(slot.epoch)) +
               " batches=" + std::to_string(batches) + " shuffle=" + bool_text(config_.shuffle_for(name())) +
               " drop_last=" + bool_text(config_.drop_last_for(name())) + description_.epoch_detail);
  const auto order = data_->orders->get(slot.epoch);
  std::vector<std::uint64_t> first;
  for (std::uint64_t i = 0; i < std::min<std::uint64_t>(10, order->size()); ++i) {
    // With truncation=split the order holds piece numbers (their episodes' ids), unless it
    // holds the documents the packer cuts.
    first.push_back(EpisodeWindows::episode_of((*order)[i], sampler.documents_ordered() ? nullptr : sampler.pieces()));
  }
  audit.epoch_opened(description_.unit,
                     AuditTrail::EpochOpened{name(), slot.epoch, epoch_seed_text(config_.epoch_seed, slot.epoch),
                                             config_.shuffle_for(name()), sampler.ids_in_epoch(slot.epoch), batches,
                                             format_id_list(first), slot.batch_in_epoch});
}

// ---- RandomSplit: batch k is a function of k ----

RandomSplit::RandomSplit(std::string name, const Config& config, std::unique_ptr<SplitData> data,
                         std::unique_ptr<BatchSource> source, SampledRowSource* sampled,
                         const detail::BatchShape& shape, Description description)
    : DatasetSplit(std::move(name), config, std::move(data), shape, std::move(description)) {
  source_ = std::move(source);
  sampled_ = sampled;
}

std::optional<DatasetSplit::EpochStep> RandomSplit::advance(const detail::BatchSlot& /*slot*/) {
  next_.batch_in_epoch = next_.step;
  return std::nullopt;
}

SplitPosition RandomSplit::resolve(const SplitPosition& saved) const {
  return check_follows_from_step(name(), saved, SplitPosition{saved.step, 0, saved.step, 0});
}

// ---- EqualEpochsSplit: every epoch has batches_in_epoch(0) batches ----

EqualEpochsSplit::EqualEpochsSplit(std::string name, const Config& config, std::unique_ptr<SplitData> data,
                                   std::unique_ptr<BatchSource> source, SampledRowSource* sampled,
                                   const detail::BatchShape& shape, Description description)
    : DatasetSplit(std::move(name), config, std::move(data), shape, std::move(description)) {
  source_ = std::move(source);
  sampled_ = sampled;
}

std::uint64_t EqualEpochsSplit::batches_in_epoch_at(const SplitPosition& at) const {
  return source_->batches_in_epoch(at.epoch);
}

std::optional<DatasetSplit::EpochStep> EqualEpochsSplit::advance(const detail::BatchSlot& slot) {
  const std::uint64_t batches = source_->batches_in_epoch(slot.epoch);
  const bool last = slot.batch_in_epoch + 1 >= batches;
  next_.epoch = last ? slot.epoch + 1 : slot.epoch;
  next_.batch_in_epoch = last ? 0 : slot.batch_in_epoch + 1;
  return EpochStep{batches, last};
}

SplitPosition EqualEpochsSplit::resolve(const SplitPosition& saved) const {
  // The sampler's arithmetic (epochs of batches_in_epoch(0) batches, or a batch-size
  // schedule's walk), which its plans follow.
  const SampledBatch at = data_->sampler->position(saved.step);
  const SplitPosition resolved{saved.step, at.epoch, at.batch_in_epoch, 0};
  check_epoch_seed(name(), config_, resolved.epoch);
  return check_follows_from_step(name(), saved, resolved);
}

std::string EqualEpochsSplit::short_of_a_batch() const {
  if (source_->batches_in_epoch(0) > 0) return {};
  const EpisodeSampler& sampler = *data_->sampler;
  if (const DocumentPieces* pieces = sampler.pieces();
      pieces != nullptr && pieces->numbering() == DocumentPieces::Numbering::tokens) {
    // Cut epochs: an epoch holds at least the rows at the longest stage length.
    const std::uint64_t T = sampler.settings().schedule->largest_block_size();
    return std::to_string(sampler.kept_size()) + " kept episodes cut into " + std::to_string(pieces->rows_at(T)) +
           " rows at the longest block_size " + std::to_string(T) + " (truncation=split)";
  }
  if (sampler.pieces() != nullptr) {
    return std::to_string(sampler.kept_size()) + " kept episodes in " + std::to_string(sampler.size()) +
           " pieces (truncation=split)";
  }
  return std::to_string(sampler.size()) + description().sampled_as;
}

// ---- PackedEpochsSplit: epochs of varying length, entered mid-batch ----

PackedEpochsSplit::PackedEpochsSplit(std::string name, const Config& config, std::unique_ptr<SplitData> data,
                                     std::unique_ptr<PackedBatchSource> source, const detail::BatchShape& shape,
                                     Description description)
    : DatasetSplit(std::move(name), config, std::move(data), shape, std::move(description)), packed_(*source) {
  source_ = std::move(source);
}

std::uint64_t PackedEpochsSplit::batches_in_epoch_at(const SplitPosition& at) const {
  return packed_.batches_in_epoch_at(at);
}

std::optional<DatasetSplit::EpochStep> PackedEpochsSplit::advance(const detail::BatchSlot& slot) {
  // The batch says where the next one starts; it may have completed its epoch (and, on a
  // split of few rows, more than one).
  const std::uint64_t batches =
      packed_.batches_in_epoch_at(SplitPosition{slot.step, slot.epoch, slot.batch_in_epoch, slot.row_in_epoch});
  const bool last = slot.next_epoch != slot.epoch;
  next_.epoch = slot.next_epoch;
  next_.row_in_epoch = slot.next_row_in_epoch;
  next_.batch_in_epoch = last ? 0 : slot.batch_in_epoch + 1;
  return EpochStep{batches, last};
}

void PackedEpochsSplit::check_saved(const SplitPosition& saved) const { check_packed_reachable(name(), saved); }

SplitPosition PackedEpochsSplit::resolve(const SplitPosition& saved) const {
  // Under a sequence-length schedule the epoch's packing depends on where it starts: the
  // global row rows_before(step) - row_in_epoch.
  if (packed_.changes_length() && saved.row_in_epoch > schedule_->rows_before(saved.step)) {
    throw Error(ErrorKind::state,
                "invalid resume state: splits." + name() + ".row_in_epoch=" + std::to_string(saved.row_in_epoch) +
                    " exceeds the " + std::to_string(schedule_->rows_before(saved.step)) +
                    " global rows of the shape_schedule's steps before step " + std::to_string(saved.step));
  }
  const std::uint64_t rows = packed_.packing(saved.epoch, packed_.first_row_of(saved))->rows();
  if (saved.row_in_epoch >= rows) {
    throw Error(ErrorKind::state, "invalid resume state: splits." + name() +
                                      ".row_in_epoch=" + std::to_string(saved.row_in_epoch) + " but epoch " +
                                      std::to_string(saved.epoch) + " packs into " + std::to_string(rows) + " rows");
  }
  check_epoch_seed(name(), config_, saved.epoch);
  return saved;
}

std::string PackedEpochsSplit::short_of_a_batch() const {
  // Packed batches continue into the next epoch, so they always form; a split whose epoch
  // does not fill one global batch would repeat episodes within a batch.
  std::uint64_t rows = packed_.packing(0)->rows();
  // The largest global batch of a schedule must fit as well; under a sequence-length
  // schedule, with the epoch packed at each stage's length (the longest packs fewest rows).
  const std::uint64_t largest = largest_batch_rows(config_, name()) * data_parallel_size(config_);
  if (!config_.epoch_drop_last) return {};
  if (packed_.changes_length()) {
    for (const ShapeSchedule::Stage& stage : schedule_->stages()) {
      rows = std::min(rows, packed_.rows_at_length(0, static_cast<std::size_t>(stage.block_size)));
    }
  }
  if (rows >= largest) return {};
  return std::to_string(data_->sampler->kept_size()) + " kept episodes that pack into " + std::to_string(rows) +
         " rows";
}

}  // namespace tokenfeed
