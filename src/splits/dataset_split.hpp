// DatasetSplit: one split of one dataset (not a mixture): its files, its sampler and epoch
// orders, its batch source, and the epoch arithmetic of its sampling layout, one class each:
//  - RandomSplit: batch_sampling_mode=random; no epochs, batch k is a function of k.
//  - EqualEpochsSplit: sft_episode and token_stream in epoch mode; every epoch has
//    batches_in_epoch(0) batches, so the position follows from the step.
//  - PackedEpochsSplit: sft_packed; epochs pack into different row counts and a batch may
//    continue into the next epoch, so the position is carried by the batches and the state.
// The dataset mode's builder (mode_builder.hpp) opens the files and builds the one that
// fits; nothing else asks the mode.
//
// Thread-safety: as LoaderSplit.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataset/episode_dataset.hpp"
#include "dataset/token_stream.hpp"
#include "sampling/shape_schedule.hpp"
#include "splits/loader_split.hpp"
#include "modes/episode_window.hpp"
#include "modes/epoch_orders.hpp"
#include "modes/packed_batch_source.hpp"
#include "modes/sampled_row_source.hpp"
#include "sampling/episode_sampler.hpp"

namespace tokenfeed {

// What a split is read from. Heap-held by its DatasetSplit, so that the batch source's
// references into it stay valid.
struct SplitData {
  std::optional<EpisodeSplit> episodes;     // the SFT modes
  std::optional<TokenStreamSplit> stream;   // token_stream
  std::unique_ptr<EpisodeWindows> windows;  // the SFT modes: what a row keeps of an episode
  // sft_episode under a sequence-length schedule: the windows of each other stage length.
  std::vector<std::unique_ptr<EpisodeWindows>> stage_windows;
  std::unique_ptr<EpisodeSampler> sampler;  // over kept episode ids, pieces or windows
  std::unique_ptr<EpochOrders> orders;      // the sampler's orders in use
  std::uint64_t fingerprint = 0;            // the split's layout, lengths and dtype
};

class DatasetSplit : public LoaderSplit {
 public:
  // How the split is described, settled when it opens.
  struct Description {
    SampledUnit unit;
    std::string sampled_as;    // after the sampler's size: " kept episodes", " windows of block_size + 1"
    std::string epoch_detail;  // the epoch line's end: " pad_id=0 mask=true", " document_aware=false"
    SplitInfo figures;         // split_info's counts and mask
  };

  // REQUIRES: `config` (the dataset's settled config) outlives the split; `data` holds a
  // sampler and orders.
  DatasetSplit(std::string name, const Config& config, std::unique_ptr<SplitData> data, const detail::BatchShape& shape,
               Description description);
  // Stops the pipeline first: its stages read the source and data destroyed here.
  ~DatasetSplit() override { reset_pipeline(); }

  BatchSource& source() const noexcept override { return *source_; }
  // source() when it samples rows by id (sft_episode and token_stream, without a
  // context-parallel split): a mixture then gathers its rows by id, without a plan per
  // row. Null otherwise.
  SampledRowSource* sampled_rows() const noexcept { return sampled_; }
  SplitInfo info() const override;
  const ShapeSchedule* shape_schedule() const noexcept override { return schedule_.get(); }
  SplitPosition resume_position(const SplitPosition& saved) const final;

  const SplitData& data() const noexcept { return *data_; }
  const Description& description() const noexcept { return description_; }

  // In epoch mode with epoch_drop_last, a split smaller than one global batch yields no
  // batch: Error(config) for train; for val a warning, and get_batch fails (a trainer that
  // never evaluates is not stopped by it).
  void check_forms_a_batch();
  // The same for a split with nothing to sample (`why`), as Error(kind).
  void refuse_batches(const std::string& why, ErrorKind kind);

 protected:
  // Where an epoch stands after a batch: its batch count, and whether the batch was its last.
  struct EpochStep {
    std::uint64_t batches = 0;
    bool last = false;
  };
  // Moves next_ past `slot` (next_.step is set); nullopt without epochs.
  virtual std::optional<EpochStep> advance(const detail::BatchSlot& slot) = 0;
  // Refuses a saved position no run reaches (before the split's usability is checked).
  virtual void check_saved(const SplitPosition& saved) const { (void)saved; }
  // The position `saved` resumes to. REQUIRES: the split can form a batch.
  virtual SplitPosition resolve(const SplitPosition& saved) const = 0;
  // What the split holds when it forms no batch (check_forms_a_batch); empty when it does.
  virtual std::string short_of_a_batch() const { return {}; }

  void consumed(const detail::BatchSlot& slot, AuditTrail& audit) final;
  void forget_announced() override { announced_.reset(); }

  const Config& config_;
  std::unique_ptr<SplitData> data_;
  std::unique_ptr<BatchSource> source_;            // set by the layout's constructor
  SampledRowSource* sampled_ = nullptr;            // source_ when it samples rows by id (sampled_rows)
  std::shared_ptr<const ShapeSchedule> schedule_;  // the split's batch-size schedule; null: none

 private:
  Description description_;
  // The epoch whose start (or resumption) was last logged; a run that starts or resumes
  // mid-epoch logs epoch_resume for it, so that every epoch_complete has an opening line.
  std::optional<std::uint64_t> announced_;

  void announce_epoch(const detail::BatchSlot& slot, std::uint64_t batches, AuditTrail& audit) const;
};

class RandomSplit final : public DatasetSplit {
 public:
  RandomSplit(std::string name, const Config& config, std::unique_ptr<SplitData> data,
              std::unique_ptr<BatchSource> source, SampledRowSource* sampled, const detail::BatchShape& shape,
              Description description);
  Epochs epochs() const noexcept override { return Epochs::none; }
  std::uint64_t batches_in_epoch_at(const SplitPosition&) const override { return 0; }

 private:
  std::optional<EpochStep> advance(const detail::BatchSlot& slot) override;
  SplitPosition resolve(const SplitPosition& saved) const override;
};

class EqualEpochsSplit final : public DatasetSplit {
 public:
  EqualEpochsSplit(std::string name, const Config& config, std::unique_ptr<SplitData> data,
                   std::unique_ptr<BatchSource> source, SampledRowSource* sampled, const detail::BatchShape& shape,
                   Description description);
  Epochs epochs() const noexcept override { return Epochs::equal; }
  std::uint64_t batches_in_epoch_at(const SplitPosition& at) const override;

 private:
  std::optional<EpochStep> advance(const detail::BatchSlot& slot) override;
  SplitPosition resolve(const SplitPosition& saved) const override;
  std::string short_of_a_batch() const override;
};

class PackedEpochsSplit final : public DatasetSplit {
 public:
  PackedEpochsSplit(std::string name, const Config& config, std::unique_ptr<SplitData> data,
                    std::unique_ptr<PackedBatchSource> source, const detail::BatchShape& shape,
                    Description description);
  Epochs epochs() const noexcept override { return Epochs::varying; }
  std::uint64_t batches_in_epoch_at(const SplitPosition& at) const override;

 private:
  const PackedBatchSource& packed_;

  std::optional<EpochStep> advance(const detail::BatchSlot& slot) override;
  void check_saved(const SplitPosition& saved) const override;
  SplitPosition resolve(const SplitPosition& saved) const override;
  std::string short_of_a_batch() const override;
};

}  // namespace tokenfeed
