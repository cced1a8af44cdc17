#include "mixture/mixture.hpp"

#include <algorithm>
#include <utility>

#include "launch/memory_budget.hpp"
#include "mixture/mixture_sizes.hpp"
#include "launch/parallel_layout.hpp"
#include "splits/resume_state.hpp"
#include "splits/shape_plan.hpp"
#include "modes/context_parallel_split.hpp"
#include "util/checked_math.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {
namespace {

// The most epochs of one source a global batch may span. Each epoch passed is found (a
// packed source packs it) and written to the audit log, so a step spanning millions of
// epochs (a world_size of 2^40 over a small source) would run for hours and write
// gigabytes: refused at open, with the keys to change.
constexpr std::uint64_t kMaxEpochsPerStep = std::uint64_t{1} << 16;

// `steps`: the split's step axis; its largest global batch is the most rows of a step.
void check_epochs_per_step(const LoaderSplit& part, const std::string& source, const ShapeSchedule& steps) {
  if (part.epochs() == Epochs::none) return;
  const std::uint64_t rows = part.source().batches_in_epoch(0);
  const std::uint64_t rows_per_step = steps.largest_global_batch();
  if (rows == 0 || rows_per_step / rows <= kMaxEpochsPerStep) return;
  const std::string step = steps.stages().size() == 1 ? "one step of batch_size x world_size"
                                                      : "the largest step of the shape_schedule, global_batch_size";
  throw Error(ErrorKind::config, "mixture source '" + source + "': " + step + " = " + std::to_string(rows_per_step) +
                                     " rows spans up to " + std::to_string(rows_per_step / rows) +
                                     " epochs of its split '" + part.name() + "' (" + std::to_string(rows) +
                                     " rows in epoch 0), more than " + std::to_string(kMaxEpochsPerStep) +
                                     "; lower world_size or batch_size");
}

}  // namespace

// ---- MixtureSplit ----

MixtureSplit::MixtureSplit(std::string name, const Config& config, const MixtureSchedule& schedule,
                           std::vector<const DatasetSplit*> parts, std::vector<std::int64_t> seeds,
                           const detail::BatchShape& shape)
    : LoaderSplit(std::move(name), shape, config),
      config_(config),
      schedule_(schedule),
      rows_schedule_(&schedule),
      parts_(std::move(parts)),
      seeds_(std::move(seeds)),
      shape_schedule_(shape_schedule_of(config, this->name())),
      announced_(parts_.size()) {
  make_source(schedule);
}

void MixtureSplit::make_source(const MixtureSchedule& schedule) {
  share_.reset();  // it reads source_
  std::vector<MixtureBatchSource::Member> members;
  for (const DatasetSplit* part : parts_) {
    MixtureBatchSource::Member member;
    member.source = &part->source();
    member.sampled = part->sampled_rows();
    member.shape = part->shape();  // its own one-row shape: the source runs at batch_size 1
    member.epochs = part->epochs();
    members.push_back(member);
  }
  // The sources' rows are whole; with context_parallel_split this rank's share is cut from
  // them (each sequence's, when the sources pad them for it, else each row's).
  const detail::BatchShape& shape = this->shape();
  detail::BatchShape whole = shape;
  whole.cols = shape.full_cols();
  whole.context_parallel = 1;
  source_ = std::make_unique<MixtureBatchSource>(
      std::move(members), schedule, whole,
      MixtureBatchSource::Options{data_parallel_size(config_), data_parallel_rank(config_)});
  if (shape.context_parallel > 1) {
    const ContextParallelShare share{shape.context_parallel,
                                     static_cast<std::size_t>(config_.context_parallel_rank.value_or(0)),
                                     shape.padded_sequences};
    share_ = std::make_unique<ContextParallelSplitSource>(*source_, whole, share);
  }
}

SplitPosition MixtureSplit::resume_position(const SplitPosition& saved) const {
  if (config_.dataset_mode == DatasetMode::sft_packed && config_.batch_sampling_mode == SamplingMode::epoch) {
    check_packed_reachable(name(), saved);
  }
  // A mixture's batch k is a function of k alone, like random mode.
  return check_follows_from_step(name(), saved, SplitPosition{saved.step, 0, saved.step, 0});
}

SplitInfo MixtureSplit::info() const {
  SplitInfo info;
  info.name = name();
  for (const DatasetSplit* part : parts_) {
    const SplitInfo& f = part->description().figures;  // one of episodes and windows is 0
    info.episodes += f.episodes;
    info.kept_episodes += f.kept_episodes;
    info.windows += f.windows;
    info.tokens += f.tokens;
    info.shards += f.shards;
  }
  info.mask = mask();
  return info;
}

std::optional<std::uint64_t> MixtureSplit::source_epoch_after(std::size_t source, std::uint64_t steps) const {
  if (!source_->has_epochs(source)) return std::nullopt;
  const std::uint64_t rows =
      rows_schedule_->rows_before(static_cast<std::uint32_t>(source), rows_schedule_->steps().rows_before(steps));
  return source_->epoch_of(source, rows);
}

void MixtureSplit::forget_announced() { std::fill(announced_.begin(), announced_.end(), std::nullopt); }

void MixtureSplit::consumed(const detail::BatchSlot& slot, AuditTrail& audit) {
  const std::uint64_t step = slot.step;
  next_.epoch = 0;  // a mixture's position is its step alone
  next_.batch_in_epoch = next_.step;
  announce_stage(step, audit);
  announce_shape_stage(slot, config_.block_size, audit);
  // Each source's epochs that the global batch `step` opened or closed (every rank writes
  // the same events: they follow from the step alone).
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    if (!source_->has_epochs(i)) continue;
    const auto index = static_cast<std::uint32_t>(i);
    const ShapeSchedule& steps = rows_schedule_->steps();
    const std::uint64_t before = rows_schedule_->rows_before(index, steps.rows_before(step));
    const std::uint64_t after = rows_schedule_->rows_before(index, steps.rows_before(step + 1));
    if (after != before) follow_source_epochs(i, before, after, audit);
  }
}

void MixtureSplit::announce_stage(std::uint64_t step, AuditTrail& audit) const {
  const std::size_t stage = schedule_.stage_of_step(step);
  if (schedule_.stage_first_step(stage) != step) return;
  std::string weights;
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    weights += (weights.empty() ? "" : ",") + config_.mixture[i].name + "=" + schedule_.stage_weight_texts(stage)[i];
  }
  log_line(LogLevel::info, "[tokenfeed] split=" + name() + " stage=" + std::to_string(stage) +
                               " step=" + std::to_string(step) + " weights=" + weights);
  audit.stage_start(name(), stage, step, weights);
}

void MixtureSplit::follow_source_epochs(std::size_t i, std::uint64_t before, std::uint64_t after, AuditTrail& audit) {
  const std::string& source = config_.mixture[i].name;
  const std::uint64_t last = source_->epoch_of(i, after - 1);
  for (std::uint64_t e = source_->epoch_of(i, before); e <= last; ++e) {
    const std::uint64_t first = source_->epoch_first_row(i, e);
    const std::uint64_t end = source_->epoch_first_row(i, e + 1);
    const std::string seed = epoch_seed_text(seeds_[i], e);
    if (announced_[i] != e) {
      announced_[i] = e;
      const bool resumed = first < before;
      const std::optional<std::uint64_t> resumed_at = resumed ? std::optional(before - first) : std::nullopt;
      audit.source_epoch_opened(name(), source, e, seed, end - first, resumed_at);
      log_line(LogLevel::info, "[tokenfeed] split=" + name() + " source=" + source + " epoch=" + std::to_string(e) +
                                   (resumed ? " resumed_at_row=" + std::to_string(before - first) : std::string()) +
                                   " rows=" + std::to_string(end - first));
    }
    if (end <= after) audit.source_epoch_complete(name(), source, e, seed, end - first);
  }
}

// ---- Mixture ----

Mixture::Mixture(Config config, std::string decode_threads_source, ParallelLayout layout, std::string rank_source)
    : config_(std::move(config)),
      decode_threads_source_(std::move(decode_threads_source)),
      rank_source_(std::move(rank_source)) {
  layout_ = std::move(layout);
  open_members();
  weigh_by_sizes();
  make_schedule();
  length_members_ = open_length_members(*schedule_);
  for (const char* name : kSplitNames) open_split(name);
  make_fingerprint();
  std::vector<std::pair<std::string, detail::BatchShape>> shapes;
  for (const auto& [name, split] : own_) shapes.emplace_back(name, split->shape());
  check_memory_bound(config_, shapes);
  announce_open();
}

Config mixture_member_config(const Config& config, const MixtureSource& source) {
  Config c = config;
  c.mixture.clear();
  c.stages.clear();
  c.mixture_temperature.reset();
  c.mixture_planned_steps.reset();
  c.dataset_dir.clear();
  c.shape_schedule.clear();  // the mixture's steps are scheduled, never a source's single rows
  for (const auto& [key, value] : source.keys) set_config_value(c, key, value);
  // A source's row k is its batch k at batch_size 1 and world_size 1, read by the mixture's
  // pipeline: the source has no ranks, no audit log and no threads of its own.
  c.batch_size = 1;
  c.val_overrides.batch_size.reset();  // val's rows too (its block size stays: the source's val rows have it)
  c.world_size = 1;
  c.rank = 0;
  c.tensor_parallel_size = c.context_parallel_size = c.pipeline_parallel_size = 1;
  c.data_parallel_rank.reset();
  c.data_parallel_size.reset();
  c.context_parallel_rank.reset();
  c.data_loading = DataLoading::every_rank;
  c.epoch_drop_last = false;  // at one row per batch nothing is dropped anyway
  c.audit_log_dir.clear();
  c.decode_threads = 1;
  c.fields = kEveryBatchField;  // the mixture joins whole rows; its batches hand out what is chosen
  return c;
}

// Whether the rows of source `member` (its settled config) depend on the lengths of its
// rows before them: packed rows (the packer fills each at its length), token-stream epoch
// windows (cut from the units at each length) and sft_episode's truncation=split in epoch
// order (documents cut at each row's length from the token reached). Their rows under a
// sequence-length schedule follow from the schedule in the source's own rows
// (source_row_stages).
bool rows_follow_lengths(const Config& member) {
  const bool epoch = member.batch_sampling_mode == SamplingMode::epoch;
  return member.dataset_mode == DatasetMode::sft_packed ||
         (member.dataset_mode == DatasetMode::token_stream && epoch) ||
         (member.dataset_mode == DatasetMode::sft_episode && member.truncation == Truncation::split && epoch);
}

// Source `source`'s rows under `schedule` as a shape schedule of its own at one row a step:
// its rows within each shape stage (its picks among the stage's global rows) at the stage's
// block size, in order. Stages that give it no row are left out and neighbours of one
// length joined; the last holds for ever (rows the source never reaches).
std::vector<ShapeStage> source_row_stages(const MixtureSchedule& schedule, std::uint32_t source) {
  std::vector<ShapeStage> stages;
  std::uint64_t first = 0;  // the source's rows before the stage
  const ShapeSchedule& steps = schedule.steps();
  for (const ShapeSchedule::Stage& stage : steps.stages()) {
    const auto block_size = static_cast<std::int64_t>(stage.block_size);
    std::optional<std::uint64_t> end;
    if (stage.end_step) end = schedule.rows_before(source, steps.rows_before(*stage.end_step));
    if (end && *end == first) continue;  // no row of this source
    if (!stages.empty() && stages.back().block_size == block_size) {
      stages.back().until_step.reset();  // the same length goes on
    } else {
      stages.push_back(ShapeStage{});
      stages.back().block_size = block_size;
    }
    if (!end) break;
    stages.back().until_step = static_cast<std::int64_t>(*end);
    first = *end;
  }
  stages.back().until_step.reset();  // the last stage holds for ever
  return stages;
}

// A source's resolved options within mixture `config`: its rows are the mixture's, so
// they are padded for the mixture's context parallelism (the source has no ranks: its own
// layout stays at context_parallel_size 1, and it never splits). Throws Error(config) for a
// block_size that does not suit the padding. `own_rows`: the source's rows by the mixture's
// sequence-length schedule (source_row_stages), for a source whose rows follow the lengths;
// null: its rows are kept at any stage's length (sampled episodes, random windows).
ResolvedOptions resolve_member(const Config& config, const MixtureSource& source,
                               const std::vector<ShapeStage>* own_rows = nullptr) {
  Config member = mixture_member_config(config, source);
  if (own_rows != nullptr && own_rows->size() == 1) {
    member.block_size = *own_rows->front().block_size;  // one length throughout
  } else if (own_rows != nullptr) {
    member.shape_schedule = *own_rows;
  }
  ResolvedOptions settled = resolve_options(member);
  settled.config.context_parallel_size = config.context_parallel_size;
  settled.config.context_parallel_split = config.context_parallel_split;  // the rules as the mixture's rows meet them
  settle_context_parallel_padding(settled);
  settled.config.context_parallel_split = false;
  if (own_rows != nullptr) {
    settled.open_note = "mixture source '" + source.name + "', its train rows by the mixture's shape_schedule";
  }
  // Under the mixture's sequence-length schedule its rows are kept at each stage's length.
  const auto schedule = shape_schedule_of(config, "train");
  if (own_rows == nullptr && schedule && schedule->changes_block_size()) {
    for (const ShapeSchedule::Stage& stage : schedule->stages())
      settled.mixture_block_sizes.push_back(stage.block_size);
  }
  return settled;
}

std::map<std::size_t, std::unique_ptr<SingleDataset>> Mixture::open_length_members(
    const MixtureSchedule& schedule) const {
  std::map<std::size_t, std::unique_ptr<SingleDataset>> opened;
  if (!schedule.steps().changes_block_size()) return opened;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (!rows_follow_lengths(members_[i]->config())) continue;
    const MixtureSource& source = config_.mixture[i];
    const std::vector<ShapeStage> stages = source_row_stages(schedule, static_cast<std::uint32_t>(i));
    try {
      opened.emplace(i, std::make_unique<SingleDataset>(resolve_member(config_, source, &stages)));
    } catch (const Error& e) {
      throw Error(e.kind(), "mixture source '" + source.name + "' (its rows under the shape_schedule): " + e.what());
    }
  }
  return opened;
}

const DatasetSplit& Mixture::part_of(
    std::size_t i, const std::string& name,
    const std::map<std::size_t, std::unique_ptr<SingleDataset>>& length_members) const {
  const auto it = length_members.find(i);
  if (name == "train" && it != length_members.end()) return it->second->split("train");
  return members_[i]->split(name);
}

void Mixture::open_members() {
  const bool packed = config_.dataset_mode == DatasetMode::sft_packed;
  std::string padded, whole;  // with cp > 1: the sources whose sequences are padded, and the others
  for (const MixtureSource& source : config_.mixture) {
    const std::string who = "mixture source '" + source.name + "'";
    try {
      members_.push_back(std::make_unique<SingleDataset>(resolve_member(config_, source)));
    } catch (const Error& e) {
      throw Error(e.kind(), who + ": " + e.what());
    }
    std::string& kind = pads_sequences_for_context_parallel(members_.back()->config()) ? padded : whole;
    kind += (kind.empty() ? "'" : ", '") + source.name + "'";
    const DatasetMode mode = members_.back()->config().dataset_mode;
    if (packed != (mode == DatasetMode::sft_packed)) {
      throw Error(ErrorKind::config,
                  who + " has dataset_mode=" + to_string(mode) +
                      (packed ? "; with dataset_mode=sft_packed for the mixture every source must be an sft_packed "
                                "episode dataset (each packed row holds episodes of one source)"
                              : "; sft_packed is set for the whole mixture (dataset_mode=sft_packed in <training>), "
                                "not per source"));
    }
    names_.push_back(source.name);
  }
  if (config_.context_parallel_size > 1 && !padded.empty() && !whole.empty()) {
    throw Error(ErrorKind::config,
                "context_parallel_size=" + std::to_string(config_.context_parallel_size) + ": mixture source(s) " +
                    padded +
                    " pad every sequence to a multiple of 2 x context_parallel_size (sft_packed, document-aware "
                    "token_stream) for THD attention, while " +
                    whole +
                    " make rows that are one sequence each (sft_episode, plain token_stream); a batch must be one "
                    "or the other: mix sources of one kind");
  }
}

void Mixture::weigh_by_sizes() {
  if (!has_weights_from_sizes(config_)) return;
  std::vector<const DatasetSplit*> trains;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (!members_[i]->has_split("train"))
      throw Error(ErrorKind::io, "mixture source " + names_[i] + " has no train split");
    trains.push_back(&members_[i]->split("train"));
  }
  const std::vector<SizedWeight> sized = weights_from_dataset_sizes(config_, trains);
  sized_text_ = sized_weights_text(config_, sized);
  // From here on the config is the one with these weights written out (config() gives it,
  // and a loader over it gives the same batches).
  for (std::size_t i = 0; i < members_.size(); ++i) {
    config_.mixture[i].weight = sized[i].weight.text;
    config_.mixture[i].max_epochs.reset();
  }
  config_.mixture_temperature.reset();
  config_.mixture_planned_steps.reset();
}

void Mixture::make_schedule() {
  // Each stage's full weight list: the previous stage's with this stage's changes.
  std::vector<MixtureSchedule::StageSpec> specs;
  std::vector<std::string> weights;
  for (const MixtureSource& source : config_.mixture) weights.push_back(source.weight);
  if (config_.stages.empty()) specs.push_back({weights, std::nullopt});
  for (const MixtureStage& stage : config_.stages) {
    for (const auto& [name, weight] : stage.weights) {
      weights[static_cast<std::size_t>(std::find(names_.begin(), names_.end(), name) - names_.begin())] = weight;
    }
    std::optional<std::uint64_t> until;
    if (stage.until_step) until = static_cast<std::uint64_t>(*stage.until_step);
    specs.push_back({weights, until});
  }
  // The train split's steps follow its shape_schedule (a stage's first row is the rows
  // before its first step); the other splits are never scheduled and keep the constant
  // global batch (val's own, when it has one), with the same stages.
  if (shape_schedule_of(config_, "train") || config_.val_overrides.batch_size) {
    unscheduled_ = std::make_unique<MixtureSchedule>(names_, specs, global_batch_size(with_val_shape(config_)));
  }
  schedule_ = std::make_unique<MixtureSchedule>(names_, std::move(specs), train_steps(config_));
}

const MixtureSchedule& Mixture::schedule_of(const std::string& split) const {
  return unscheduled_ && split != "train" ? *unscheduled_ : *schedule_;
}

void Mixture::open_split(const std::string& name) {
  std::string lacking;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (!members_[i]->has_split(name)) lacking += (lacking.empty() ? "" : ", ") + names_[i];
  }
  if (!lacking.empty()) {
    if (name == "train") throw Error(ErrorKind::io, "mixture source(s) " + lacking + " have no train split");
    if (members_.size() > 1) {
      log_line(LogLevel::info, "[tokenfeed] mixture: no split=" + name + " (source(s) " + lacking + " lack it)");
    }
    return;
  }
  // Val reads its own shape (the keys' unless val.batch_size / val.block_size are given).
  if (name == "val") val_config_ = with_val_shape(config_);
  const Config& config = name == "val" ? val_config_ : config_;
  std::vector<const DatasetSplit*> parts;
  std::vector<std::int64_t> seeds;
  detail::BatchShape shape;
  bool any_episode = false;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const DatasetSplit& part = part_of(i, name, length_members_);
    check_epochs_per_step(part, names_[i], schedule_of(name).steps());
    parts.push_back(&part);
    seeds.push_back(members_[i]->config().epoch_seed);
    any_episode = any_episode || !part.shape().y_is_labels;  // episode rows keep their raw y
    shape.with_document_fields = shape.with_document_fields || part.shape().with_document_fields;
    shape.with_mask = shape.with_mask || part.mask();
    shape.padded_sequences = shape.padded_sequences || part.shape().padded_sequences;
  }
  shape.rows = largest_batch_rows(config, name);   // a batch-size schedule's largest stage
  shape.cols = largest_block_size(config, name);   // and a sequence-length schedule's longest
  if (splits_rows_for_context_parallel(config)) {  // this rank's share of the rows
    shape.context_parallel = static_cast<std::size_t>(config.context_parallel_size);
    shape.cols /= shape.context_parallel;
  }
  shape.y_is_labels = !any_episode;  // episode rows keep their raw y next to the labels
  shape.contract_fields = true;
  shape.mask_is_weights = true;
  shape.packed = config_.dataset_mode == DatasetMode::sft_packed;
  shape.with_source_ids = true;
  shape.fields = config_.fields;
  auto split =
      std::make_unique<MixtureSplit>(name, config, schedule_of(name), std::move(parts), std::move(seeds), shape);
  splits_.emplace(name, split.get());
  own_.emplace(name, std::move(split));
}

void Mixture::make_fingerprint() {
  // As for one dataset: the global batch, never its split across data-parallel ranks, so
  // that a state resumes at another layout; each field named, so that a mismatch says which.
  order_fields_["global_batch_size"] = std::to_string(global_batch_size(config_));
  order_fields_["block_size"] = std::to_string(config_.block_size);
  add_val_shape_fields(config_, order_fields_);  // val's own shape, as for one dataset
  // The train split's batch sizes by step, only when scheduled (as for one dataset); the
  // stages' first steps below are on that step axis.
  if (auto schedule = shape_schedule_field(config_)) order_fields_["shape_schedule"] = std::move(*schedule);
  order_fields_["dataset_mode"] = to_string(config_.dataset_mode);
  for (std::size_t i = 0; i < members_.size(); ++i) order_fields_["source." + names_[i]] = members_[i]->fingerprint();
  for (std::size_t st = 0; st < schedule_->stages(); ++st) {
    std::string stage = std::to_string(schedule_->stage_first_step(st)) + ":";
    for (const std::uint64_t w : schedule_->stage_weights(st)) stage += " " + std::to_string(w);
    order_fields_["stage." + std::to_string(st)] = stage;
  }
  fingerprint_ = fingerprint_of(kFingerprintFormula, order_fields_);
  earlier_fingerprints_ = earlier_fingerprints_of(order_fields_);
}

std::vector<std::string> Mixture::earlier_fingerprints_of(const OrderFields& order) const {
  OrderFields earlier = order;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const std::vector<std::string>& theirs = members_[i]->earlier_fingerprints();
    if (!theirs.empty()) earlier["source." + names_[i]] = theirs.front();
  }
  if (earlier == order) return {};
  return {fingerprint_of(kFingerprintFormula, earlier)};
}

void Mixture::announce_open() {
  std::string line = "[tokenfeed] mixture sources=" + std::to_string(members_.size());
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const Config& c = members_[i]->config();
    line += " " + names_[i] + "(weight=" + config_.mixture[i].weight + " mode=" + to_string(c.dataset_mode) +
            " dir=" + c.dataset_dir.string() + ")";
  }
  line += sized_text_;
  line += " stages=" + std::to_string(schedule_->stages()) + " " +
          ranks_text(layout_, rank_source_, config_.data_loading) +
          " decode_threads=" + std::to_string(config_.decode_threads) + " (" + decode_threads_source_ + ")";
  log_line(LogLevel::info, line);

  audit_ = std::make_unique<AuditTrail>(config_);
  AuditLog::Fields figures;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    const SingleDataset& m = *members_[i];
    const std::string prefix = "source_" + names_[i] + "_";
    figures.emplace_back(prefix + "dataset_dir", m.config().dataset_dir.string());
    figures.emplace_back(prefix + "mode", to_string(m.config().dataset_mode));
    figures.emplace_back(prefix + "fingerprint", m.fingerprint());
    const DatasetSplit& train = m.split("train");
    figures.emplace_back(prefix + train.description().unit.kept + train.description().unit.plural,
                         std::to_string(train.data().sampler->kept_size()));
  }
  audit_->dataset_load(config_, fingerprint_, std::move(figures));
}

std::optional<std::uint64_t> Mixture::source_epoch_after(std::string_view split_name, std::size_t source,
                                                         std::uint64_t steps) const {
  find(split_name);  // the standard error for a missing split
  const MixtureSplit& split = *own_.find(split_name)->second;
  if (source >= members_.size()) {
    throw Error(ErrorKind::usage, "source_epoch_after: source index " + std::to_string(source) +
                                      " but the mixture has " + std::to_string(members_.size()) + " sources");
  }
  return split.source_epoch_after(source, steps);
}

}  // namespace tokenfeed
