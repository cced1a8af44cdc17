#include "splits/loader_split.hpp"

#include <algorithm>
#include <utility>

#include "launch/memory_budget.hpp"
#include "splits/resolved_options.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {

LoaderSplit::LoaderSplit(std::string name, const detail::BatchShape& shape, const Config& config)
    : name_(std::move(name)),
      shape_(shape),
      batch_size_(static_cast<std::uint64_t>(config.batch_size)),
      data_parallel_size_(data_parallel_size(config)) {
  stats_.prefetch_depth = static_cast<std::uint64_t>(config.prefetch_depth);
  stats_.decode_threads = static_cast<std::uint64_t>(config.decode_threads);
}

LoaderSplit::~LoaderSplit() = default;

void LoaderSplit::set_unusable(std::string why, ErrorKind kind) {
  unusable_ = std::move(why);
  unusable_kind_ = kind;
}

void LoaderSplit::restore(const SplitPosition& at, PipelineGate& gate) {
  restart_pipeline(gate);  // restarted at the restored step on the next take
  next_ = at;
  announced_shape_stage_.reset();
  forget_announced();
}

StepShape LoaderSplit::step_shape(std::uint64_t step) const noexcept {
  const ShapeSchedule* schedule = shape_schedule();
  if (schedule == nullptr) return StepShape{static_cast<std::size_t>(batch_size_), shape_.cols};
  // The buffers' cols are the longest block size (divided by cp with context_parallel_split);
  // the step's are its block size's share of them.
  const ShapeSchedule::Stage& stage = schedule->stage_at(step);
  const std::uint64_t longest = schedule->largest_block_size();  // 0: a schedule of batch sizes only
  const std::size_t cols =
      longest == 0 ? shape_.cols : static_cast<std::size_t>(shape_.cols * stage.block_size / longest);
  return StepShape{static_cast<std::size_t>(stage.global_batch / data_parallel_size_), cols};
}

void LoaderSplit::announce_shape_stage(const detail::BatchSlot& slot, std::int64_t block_size, AuditTrail& audit) {
  const ShapeSchedule* schedule = shape_schedule();
  if (schedule == nullptr) return;
  const std::size_t index = schedule->stage_index(slot.step);
  const ShapeSchedule::Stage& stage = schedule->stages()[index];
  if (announced_shape_stage_ == index && slot.step != stage.first_step) return;
  announced_shape_stage_ = index;
  AuditTrail::ShapeStageStart record;
  record.split = name();
  record.stage = index;
  record.first_step = stage.first_step;
  record.step = slot.step;
  record.global_batch_size = stage.global_batch;
  record.rows = slot.rows;
  record.block_size = stage.block_size != 0 ? stage.block_size : static_cast<std::uint64_t>(block_size);
  record.rows_before = schedule->rows_before(slot.step);
  if (epochs() != Epochs::none) {
    record.epoch = slot.epoch;
    record.batch_in_epoch = slot.batch_in_epoch;
  }
  audit.shape_stage_start(record);
  log_line(LogLevel::info,
           "[tokenfeed] split=" + name() + " shape_schedule stage " + std::to_string(index) + " from step " +
               std::to_string(slot.step) + ": global_batch_size=" + std::to_string(stage.global_batch) +
               " rows=" + std::to_string(slot.rows) + " block_size=" + std::to_string(record.block_size));
}

void LoaderSplit::restart_pipeline(PipelineGate& /*gate*/) {
  pipeline_.reset();  // stops and waits
  pool_.reset();      // batches still held keep their own reference
}

void LoaderSplit::stop_pipeline(PipelineGate& /*gate*/) {
  if (pipeline_) pipeline_->stop();
}

void LoaderSplit::start_pipeline(const Config& config, PipelineGate& gate) {
  const auto max_held = static_cast<std::size_t>(config.max_held_batches);
  source().seek(next_);
  const auto threads = static_cast<std::size_t>(config.decode_threads);
  const SplitPipeline::Depths depth = pool_depths(config, shape_);
  pool_ = std::make_shared<detail::BatchPool>(depth.initial + max_held, shape_, name_, depth.max + max_held);
  pipeline_ = std::make_unique<SplitPipeline>(
      source(), pool_, SplitPipeline::Options{depth.initial, threads, next_.step, depth.max, gate.trainer_may_spin});
}

std::optional<Batch> LoaderSplit::take(const Config& config, PipelineGate& gate, AuditTrail& audit,
                                       std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (!unusable_.empty()) throw Error(unusable_kind_, unusable_);
  const auto max_held = static_cast<std::size_t>(config.max_held_batches);
  if (pool_ && pool_->held() >= max_held) {
    throw Error(ErrorKind::usage, "get_batch(\"" + name_ + "\"): the trainer already holds " +
                                      std::to_string(max_held) +
                                      " batches of this split (max_held_batches); release one (Batch::release or "
                                      "destroy it) first, or raise max_held_batches");
  }
  if (!pipeline_) {
    MutexLock lock(gate.mutex);
    if (gate.stopped.load(std::memory_order_acquire)) {
      throw Error(ErrorKind::usage, "get_batch(\"" + name_ + "\") after the loader was stopped");
    }
    start_pipeline(config, gate);
  }
  double waited_us = 0;
  detail::BatchSlot* slot = pipeline_->pop(waited_us, deadline);
  if (slot == nullptr) return std::nullopt;  // the deadline passed
  slot->wait_us = waited_us;
  Batch batch = pool_->make_batch(slot);

  stats_.prefetch_depth = pipeline_->prefetch_depth();  // auto depth may have grown (and logged it)
  ++stats_.batches;
  if (waited_us > 0) ++stats_.waits;
  stats_.total_wait_us += waited_us;
  stats_.max_wait_us = std::max(stats_.max_wait_us, waited_us);
  next_.step = slot->step + 1;
  consumed(*slot, audit);
  return batch;
}

}  // namespace tokenfeed
