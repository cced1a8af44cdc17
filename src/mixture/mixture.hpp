// Mixture: a Loader over several datasets (Config::mixture). Each source is a
// SingleDataset opened on its own keys with batch_size 1 and world_size 1, so that its
// batch k is its row k (no pipeline, ranks, audit log or threads of its own); the
// MixtureSchedule chooses the source of each global row, and each split is a MixtureSplit
// reading its rows through the sources' splits.
//
// A mixture's position is its step alone (batch k is a function of k, as in random mode);
// its sources' epochs are followed for the audit log (epoch_start, epoch_complete per
// source) and source_epoch_after.
//
// Thread-safety: as SplitSet.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "splits/dataset_split.hpp"
#include "splits/single_dataset.hpp"
#include "splits/split_set.hpp"
#include "splits/weight_changes.hpp"
#include "modes/mixture_batch_source.hpp"
#include "sampling/mixture_schedule.hpp"

namespace tokenfeed {

// One split of a mixture: its rows are its sources' rows, chosen by the schedule.
class MixtureSplit final : public LoaderSplit {
 public:
  // REQUIRES: config, schedule and every part outlive the split; parts[i] is source i's
  // split of this name, seeds[i] its epoch_seed.
  MixtureSplit(std::string name, const Config& config, const MixtureSchedule& schedule,
               std::vector<const DatasetSplit*> parts, std::vector<std::int64_t> seeds,
               const detail::BatchShape& shape);
  // Stops the pipeline first: its stages read the source destroyed here.
  ~MixtureSplit() override { reset_pipeline(); }

  BatchSource& source() const noexcept override { return share_ ? *share_ : static_cast<BatchSource&>(*source_); }
  Epochs epochs() const noexcept override { return Epochs::none; }
  std::uint64_t batches_in_epoch_at(const SplitPosition&) const override { return 0; }
  SplitPosition resume_position(const SplitPosition& saved) const override;
  // The sources' totals; a mixture has no epochs of its own.
  SplitInfo info() const override;
  const ShapeSchedule* shape_schedule() const noexcept override { return shape_schedule_.get(); }
  // The epoch source `source` is in after the first `steps` batches; nullopt when it has no
  // epochs. REQUIRES: source < the number of sources.
  std::optional<std::uint64_t> source_epoch_after(std::size_t source, std::uint64_t steps) const;
  // Reads its rows by `schedule` from now on (weight changes: mixture_steering.cpp): stops
  // and drops the pipeline, which restarts at the consumed step on the next take and makes
  // again, identically, the batches it had made ahead (steps before the change's are
  // unchanged). `schedule` must outlive the split or the next call. `parts`, when not
  // empty, replace the sources' splits (sources whose rows follow the schedule's lengths,
  // opened again for it: Mixture::open_length_members); the old ones may be destroyed
  // after the call.
  void use_schedule(const MixtureSchedule& schedule, PipelineGate& gate, std::vector<const DatasetSplit*> parts = {})
      TF_REQUIRES(gate.mutex);

 private:
  const Config& config_;
  const MixtureSchedule& schedule_;       // the config's: its stages are what stage_start names
  const MixtureSchedule* rows_schedule_;  // what the rows follow: the config's with the weight changes
  std::vector<const DatasetSplit*> parts_;
  std::vector<std::int64_t> seeds_;
  std::unique_ptr<MixtureBatchSource> source_;  // the whole rows
  // The split's batch-size schedule (shape_stage_start events); null: none.
  std::shared_ptr<const ShapeSchedule> shape_schedule_;
  // With context_parallel_split: this rank's share of source_'s rows; null otherwise.
  std::unique_ptr<BatchSource> share_;
  // Per source, the epoch whose start was last written to the audit log.
  std::vector<std::optional<std::uint64_t>> announced_;

  // source_ (and share_) over parts_, reading by `schedule`.
  void make_source(const MixtureSchedule& schedule);
  void consumed(const detail::BatchSlot& slot, AuditTrail& audit) override;
  void forget_announced() override;
  // Writes stage_start when `step` opens a stage.
  void announce_stage(std::uint64_t step, AuditTrail& audit) const;
  // Source i's epochs that its rows [before, after) open or close.
  void follow_source_epochs(std::size_t i, std::uint64_t before, std::uint64_t after, AuditTrail& audit);
};

// Source `source`'s config inside mixture `config`: its keys over the mixture's, at one row
// per batch, with no ranks, audit log or threads of its own (the mixture's pipeline reads it).
Config mixture_member_config(const Config& config, const MixtureSource& source);

class Mixture final : public SplitSet {
 public:
  // REQUIRES: `config` validated with its ranks and decode_threads settled (resolve_options;
  // `decode_threads_source` says where the threads came from, for the open line). Opens
  // every source; throws Error naming the source that fails.
  // `layout` and `rank_source`: the process in the parallel layout and where its rank came
  // from, as resolve_options settled them (for the open line).
  Mixture(Config config, std::string decode_threads_source, ParallelLayout layout, std::string rank_source);

  const Config& config() const noexcept override { return config_; }
  const DatasetMetadata& metadata() const noexcept override { return no_metadata_; }
  // The epoch source `source` is in after `steps` batches of `split` (nullopt without
  // epochs). Throws Error(usage) for a bad index or split.
  std::optional<std::uint64_t> source_epoch_after(std::string_view split, std::size_t source,
                                                  std::uint64_t steps) const;

  // Weight changes from the trainer (mixture_steering.cpp; the rule in weight_changes.hpp).
  // They apply to the train split; other splits keep the config's stages.
  std::uint64_t earliest_weight_step() const;
  void set_mixture_weights(const std::map<std::string, std::string>& weights, std::uint64_t at_step,
                           PipelineGate& gate);
  const std::vector<WeightChange>& weight_changes() const noexcept { return changes_; }
  // load_state: what to commit so that this loader has a state's change history. nullopt
  // when it has it already (or the state has none and this loader none); the state's
  // changes when this loader has none. Throws Error(state) when this loader made other
  // changes, or for changes no loader makes. Changes nothing.
  std::optional<PreparedWeights> adopt_state_changes(const std::vector<WeightChange>& state_changes) const;
  // Makes `prepared` (from adopt_state_changes) this loader's history: stops and restarts
  // the train split's pipeline under `gate`'s mutex. The trainer thread calls it.
  void commit_weights(PreparedWeights prepared, PipelineGate& gate);

  static constexpr const char* kFingerprintFormula = "tokenfeed-mixture-v2";

 private:
  Config config_;
  std::string decode_threads_source_;
  std::string rank_source_;
  DatasetMetadata no_metadata_;
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<SingleDataset>> members_;
  // Under a sequence-length schedule, the sources whose row k depends on the lengths of
  // their rows before it (packed rows, token-stream epoch windows), by index: each opened
  // again with the schedule in its own rows (source_row_stages), for the train split. The
  // schedule's weights decide those rows, so a weight change opens them anew. members_
  // still serve val, the sizes and the fingerprint.
  std::map<std::size_t, std::unique_ptr<SingleDataset>> length_members_;
  // The config's stages on the train split's step axis (its shape_schedule, if any).
  std::unique_ptr<MixtureSchedule> schedule_;
  // The same stages at val's constant global batch (the keys', or val's own shape's), for
  // the splits never scheduled (val); null when train is not scheduled and val has no batch
  // of its own (schedule_ serves every split).
  std::unique_ptr<MixtureSchedule> unscheduled_;
  // config_ with val's own shape (val.batch_size, val.block_size) in place of the keys: the
  // val split's config, set when it opens.
  Config val_config_;
  std::map<std::string, std::unique_ptr<MixtureSplit>, std::less<>> own_;
  std::string sized_text_;  // for the open line
  // Weight changes, in call order, and the train split's schedule with them (null: none).
  std::vector<WeightChange> changes_;
  std::shared_ptr<const MixtureSchedule> train_schedule_;

  // The schedule, order fields and fingerprint with `changes` (the whole history). Throws
  // Error(config) for a history whose weights leave a stage all zero, or too long a period.
  PreparedWeights prepare_weights(std::vector<WeightChange> changes) const;

  void open_members();
  // The members length_members_ holds, opened for the train split's rows under `schedule`.
  std::map<std::size_t, std::unique_ptr<SingleDataset>> open_length_members(const MixtureSchedule& schedule) const;
  // Source i's split `name` as the mixture reads it: `length_members`' train split, if it
  // holds source i, else members_'s.
  const DatasetSplit& part_of(std::size_t i, const std::string& name,
                              const std::map<std::size_t, std::unique_ptr<SingleDataset>>& length_members) const;
  // Weights "auto": computed from the sources' train splits and written into config_.
  void weigh_by_sizes();
  void make_schedule();
  // The config's schedule on split `split`'s step axis.
  const MixtureSchedule& schedule_of(const std::string& split) const;
  void open_split(const std::string& name);
  void make_fingerprint();
  // The fingerprints of `order` with each source's earlier fingerprint in place of its own
  // (SplitSet::earlier_fingerprints): what an earlier tokenfeed gave this order. Empty when
  // no source has one.
  std::vector<std::string> earlier_fingerprints_of(const OrderFields& order) const;
  void announce_open();
};

}  // namespace tokenfeed
