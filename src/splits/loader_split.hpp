// LoaderSplit: one split ("train", "val") as the Loader reads it: its batch source, where
// its stream stands, its pipeline, and the arithmetic that differs by dataset mode behind
// one interface: how its epochs are laid out, the position a saved state resumes to, how
// the position moves (and which audit events it writes) as the trainer consumes batches,
// and its SplitInfo figures. DatasetSplit (dataset_split.hpp) implements it for one
// dataset's split, per sampling layout; MixtureSplit (mixture.hpp) for a mixture's.
//
// Thread-safety: the trainer thread calls everything but stop_pipeline, which any thread
// may call (PipelineGate serialises it with a pipeline's start).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "audit/audit_trail.hpp"
#include "pipeline/batch_pool.hpp"
#include "pipeline/batch_source.hpp"
#include "pipeline/split_pipeline.hpp"
#include "pipeline/stream_position.hpp"
#include "sampling/shape_schedule.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed {

// Guards the start of a split's pipeline against a concurrent Loader::stop.
// A split's pipeline is created, replaced and stopped only with `mutex` held (the
// functions below that change it require it), so a stop from another thread never meets a
// pipeline half made; the trainer's thread alone reads it without the lock (take), since
// only that thread replaces it.
// It also carries what the loader settled at open for every pipeline it starts.
struct PipelineGate {
  Mutex mutex;
  std::atomic<bool> stopped{false};  // written under mutex; after it, no pipeline starts
  bool trainer_may_spin = true;      // set at open, then constant (ResolvedOptions)
};

class LoaderSplit {
 public:
  // `shape`: the slots get_batch hands out. `config` gives the stats' settings.
  LoaderSplit(std::string name, const detail::BatchShape& shape, const Config& config);
  virtual ~LoaderSplit();
  LoaderSplit(const LoaderSplit&) = delete;
  LoaderSplit& operator=(const LoaderSplit&) = delete;

  const std::string& name() const noexcept { return name_; }
  const detail::BatchShape& shape() const noexcept { return shape_; }
  bool mask() const noexcept { return shape_.with_mask; }
  virtual BatchSource& source() const noexcept = 0;
  // How the split's epochs are laid out (batch_source.hpp).
  virtual Epochs epochs() const noexcept = 0;

  // Batches in the epoch of position `at` (an epoch entered mid-batch counts from there);
  // 0 without epochs.
  virtual std::uint64_t batches_in_epoch_at(const SplitPosition& at) const = 0;
  // The position a state's `saved` entry resumes to. Throws Error(state) for one no run of
  // this split reaches. REQUIRES: check_resume_step(saved) passed.
  virtual SplitPosition resume_position(const SplitPosition& saved) const = 0;
  // The figures of split_info.
  virtual SplitInfo info() const = 0;
  // The split's shape schedule, settled at open (null: not scheduled, every step has the
  // config's shape). Lives as long as the split.
  virtual const ShapeSchedule* shape_schedule() const noexcept = 0;
  // This rank's rows and cols at global step `step` (Loader::batch_shape): the schedule's
  // stage, read from the schedule the split holds (no config is settled again).
  StepShape step_shape(std::uint64_t step) const noexcept;

  // Where the next batch comes from.
  const SplitPosition& next_position() const noexcept { return next_; }
  // Why get_batch cannot form one batch (val only; a train split like it refuses to open):
  // empty when it can.
  const std::string& unusable() const noexcept { return unusable_; }
  // Starts from `at` (a resume_position): the pipeline is stopped and dropped (batches the
  // trainer holds stay valid) and restarts there on the next take.
  void restore(const SplitPosition& at, PipelineGate& gate) TF_REQUIRES(gate.mutex);

  // The next batch, or nullopt when `deadline` passed first: starts the pipeline on first
  // use (Error(usage) after stop), refuses one more than max_held_batches held, counts the
  // wait, and moves the position on (consumed). Rethrows a stage's failure.
  std::optional<Batch> take(const Config& config, PipelineGate& gate, AuditTrail& audit,
                            std::optional<std::chrono::steady_clock::time_point> deadline);
  const SplitStats& stats() const noexcept { return stats_; }
  // Stops the pipeline's stages (from any thread); reset_pipeline waits.
  void stop_pipeline(PipelineGate& gate) TF_REQUIRES(gate.mutex);
  // Drops the pipeline (stops it and waits for its stages), keeping the position: it
  // restarts at the consumed step on the next take (a mixture's weight change).
  void restart_pipeline(PipelineGate& gate) TF_REQUIRES(gate.mutex);
  // Destroys the pipeline, waiting for its stages. REQUIRES: no other thread can reach the
  // split any more (its owner's destruction, after the pipelines were stopped).
  void reset_pipeline() { pipeline_.reset(); }

 protected:
  // The trainer took `slot`'s batch: advance next_ and write the audit events it closes.
  virtual void consumed(const detail::BatchSlot& slot, AuditTrail& audit) = 0;
  // restore(): epochs announced before are announced again.
  virtual void forget_announced() = 0;
  // For a split that cannot form a batch: get_batch throws Error(kind, why).
  void set_unusable(std::string why, ErrorKind kind);
  // Writes shape_stage_start (audit log and info line) when `slot` is the first batch of a
  // stage of shape_schedule() (null: not scheduled, nothing written), or the first taken since a
  // start or resume; `block_size` is the stage's when the schedule does not say it.
  void announce_shape_stage(const detail::BatchSlot& slot, std::int64_t block_size, AuditTrail& audit);

  SplitPosition next_;  // step: batches the trainer took

 private:
  std::string name_;
  detail::BatchShape shape_;
  std::uint64_t batch_size_;          // config key batch_size: the rows of an unscheduled step
  std::uint64_t data_parallel_size_;  // what divides a stage's global batch into this rank's rows
  // The shape_schedule stage last announced (announce_shape_stage); reset by restore.
  std::optional<std::size_t> announced_shape_stage_;
  std::string unusable_;
  ErrorKind unusable_kind_ = ErrorKind::config;
  std::shared_ptr<detail::BatchPool> pool_;
  std::unique_ptr<SplitPipeline> pipeline_;  // created on first take
  SplitStats stats_;

  void start_pipeline(const Config& config, PipelineGate& gate) TF_REQUIRES(gate.mutex);
};

}  // namespace tokenfeed
