// Mixture's weight changes from the trainer: the earliest step a change may take, a change
// checked and committed, and a resume state's change history adopted. The rule a change
// follows is weight_changes.hpp's; here is how it reaches the train split safely.
//
// Correct by construction: the schedule is immutable (the pipeline's threads read it
// concurrently), so a change builds a new one from the whole history, and the train
// split's pipeline is stopped and dropped before the split reads by it. The pipeline
// restarts at the consumed step and makes again the batches it had made ahead: they come
// before the change's step, where the new schedule equals the old, so they are identical.
#include <utility>

#include "launch/memory_budget.hpp"
#include "mixture/mixture.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {

void MixtureSplit::use_schedule(const MixtureSchedule& schedule, PipelineGate& gate,
                                std::vector<const DatasetSplit*> parts) {
  restart_pipeline(gate);  // stops and waits: no stage reads the old schedule after this
  rows_schedule_ = &schedule;
  if (parts.empty()) {
    source_->use_schedule(schedule);
    return;
  }
  // Sources opened again for the new weights: a source of their splits (its epochs, found
  // again, are the same before the change's step).
  parts_ = std::move(parts);
  make_source(schedule);
}

std::uint64_t Mixture::earliest_weight_step() const {
  const MixtureSplit& train = *own_.at("train");
  // The largest depth the pipeline may reach (a fixed depth, or auto's maximum): the same on
  // every rank of one config, unlike the depth auto reached at a moment.
  return train.next_position().step + pool_depths(config_, train.shape()).max;
}

PreparedWeights Mixture::prepare_weights(std::vector<WeightChange> changes) const {
  PreparedWeights prepared;
  MergedStages stages = stages_with_changes(*schedule_, changes, names_);
  // Sharing the stages before the change with the schedule in use.
  const MixtureSchedule* in_use = train_schedule_ ? train_schedule_.get() : schedule_.get();
  // On the train split's step axis (its shape_schedule, if any): a change at step N starts
  // its stage at the rows before N.
  prepared.schedule = std::make_shared<const MixtureSchedule>(names_, std::move(stages.specs), schedule_->steps(),
                                                              stages.names, in_use);
  prepared.order = order_fields_;
  set_change_fields(prepared.order, changes);
  prepared.fingerprint = fingerprint_of(kFingerprintFormula, prepared.order);
  prepared.earlier_fingerprints = earlier_fingerprints_of(prepared.order);
  prepared.changes = std::move(changes);
  return prepared;
}

void Mixture::set_mixture_weights(const std::map<std::string, std::string>& weights, std::uint64_t at_step,
                                  PipelineGate& gate) {
  const std::uint64_t earliest = earliest_weight_step();
  if (at_step < earliest) {
    throw Error(ErrorKind::usage, "set_mixture_weights(at_step=" + std::to_string(at_step) +
                                      "): the earliest step the loader can still change is " +
                                      std::to_string(earliest) + " (earliest_weight_step(): the trainer's step " +
                                      std::to_string(own_.at("train")->next_position().step) +
                                      " plus the prefetch depth); batches before it may be made already");
  }
  std::vector<WeightChange> changes = changes_;
  changes.push_back(make_weight_change(weights, at_step, names_));
  commit_weights(prepare_weights(std::move(changes)), gate);
}

std::optional<PreparedWeights> Mixture::adopt_state_changes(const std::vector<WeightChange>& state_changes) const {
  if (state_changes == changes_) return std::nullopt;
  const auto history = [](const std::vector<WeightChange>& changes) {
    std::string text;
    for (const WeightChange& c : changes) {
      text += (text.empty() ? "" : "; ") + std::string("step ") + std::to_string(c.step) + ": " + weights_text(c);
    }
    return text.empty() ? std::string("none") : text;
  };
  if (!changes_.empty()) {
    throw Error(ErrorKind::state, "resume state records other mixture weight changes (" + history(state_changes) +
                                      ") than this loader made (" + history(changes_) +
                                      "): load the state into a new loader, which applies the state's changes");
  }
  std::vector<WeightChange> checked;
  try {
    for (const WeightChange& c : state_changes) checked.push_back(make_weight_change(c.weights, c.step, names_));
    return prepare_weights(std::move(checked));
  } catch (const Error& e) {
    throw Error(ErrorKind::state, std::string("invalid resume state: its weight_changes: ") + e.what());
  }
}

void Mixture::commit_weights(PreparedWeights prepared, PipelineGate& gate) {
  // Sources whose rows follow the lengths: their rows of each length are the new weights'
  // (the same before the change's step, so the rows made already stay what they were).
  // Opened before anything changes, so that an error leaves this loader as it was.
  std::map<std::size_t, std::unique_ptr<SingleDataset>> reopened = open_length_members(*prepared.schedule);
  std::vector<const DatasetSplit*> parts;
  if (!reopened.empty()) {
    for (std::size_t i = 0; i < members_.size(); ++i) parts.push_back(&part_of(i, "train", reopened));
  }
  MutexLock lock(gate.mutex);
  own_.at("train")->use_schedule(*prepared.schedule, gate, std::move(parts));
  length_members_ = std::move(reopened);  // after the split dropped the old ones
  // The changes not recorded yet (a call adds one; an adopted state all of its own).
  for (std::size_t i = changes_.size(); i < prepared.changes.size(); ++i) {
    const WeightChange& c = prepared.changes[i];
    audit_->weights_changed("train", c.step, weights_text(c));
    log_line(LogLevel::info,
             "[tokenfeed] split=train weights_changed step=" + std::to_string(c.step) + " weights=" + weights_text(c));
  }
  train_schedule_ = std::move(prepared.schedule);  // after the split dropped the old one
  changes_ = std::move(prepared.changes);
  order_fields_ = std::move(prepared.order);
  fingerprint_ = std::move(prepared.fingerprint);
  earlier_fingerprints_ = std::move(prepared.earlier_fingerprints);
}

}  // namespace tokenfeed
