// The SFT modes' builders (mode_builder.hpp). EpisodeModes is what sft_episode and
// sft_packed share: an episode-indexed split opened at the settled dtypes (or the
// documents of a Megatron or datatrove token stream, each an episode), the episodes
// episode_min_tokens keeps, what a row keeps of each (EpisodeWindows: block_size + 1
// tokens, cut by truncation), the sampler over them, the split's description, and after
// open the token dtype, mask dtype and use_loss_mask=auto the split files settle.
// EpisodeModeBuilder is sft_episode: one episode (or, with truncation=split, one piece)
// per row, sampled by id. sft_packed is PackedModeBuilder (packed_mode.hpp).
//
// Thread-safety: as ModeBuilder.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dataset/episode_dataset.hpp"
#include "modes/episode_batch_source.hpp"
#include "modes/episode_window.hpp"
#include "sampling/episode_sampler.hpp"
#include "splits/mode_builder.hpp"
#include "util/id_list.hpp"

namespace tokenfeed {

class EpisodeModes : public ModeBuilder {
 public:
  // episode_min_tokens, which decides the kept episodes.
  void add_order_fields(const Config& settled, OrderFields& fields) const override;
  std::unique_ptr<DatasetSplit> open_split(const ResolvedOptions& settled, const std::string& name) const final;
  OpenedSplits open_splits(ResolvedOptions& settled) const final;

  // How an episode split is opened: the settled dtypes; masks mapped unless use_loss_mask
  // is false (auto maps the masks that exist).
  static EpisodeSplitOptions split_options(const Config& settled);
  // True when split `name` is a token stream (no episodes.idx), whose files' documents are
  // read as the episodes (EpisodeSplit::open_documents); with val_fraction, val is when
  // train is.
  static bool reads_documents(const Config& settled, const std::string& name);
  // Split `name`, episode-indexed or the documents of a token stream (with val_fraction,
  // those the hash assigns it; refused over an episode-indexed dataset).
  static EpisodeSplit open_episodes(const Config& settled, const std::string& name);
  // What a row keeps of each episode of `split`: block_size + 1 tokens, cut by truncation.
  // REQUIRES: split outlives the result.
  static std::unique_ptr<EpisodeWindows> windows(const ResolvedOptions& settled, const EpisodeSplit& split);
  // Under a sequence-length schedule (its own, or a mixture's for its source's train rows:
  // ResolvedOptions::mixture_block_sizes), the windows of every stage length other than the
  // key's, made into data.stage_windows (data.episodes and data.windows set); empty without
  // one.
  static std::vector<const EpisodeWindows*> stage_windows(const ResolvedOptions& settled, const std::string& name,
                                                          SplitData& data);
  // The sampler of an episode split's `kept` ids with `settings`: of the kept episodes, or
  // with truncation=split of their pieces (DocumentPieces over the split's lengths).
  // `packer_cuts`: packed rows that change length (packed_rows_change_length), whose
  // packer cuts the documents itself: with truncation=split the documents are sampled and
  // their pieces numbered by tokens.
  static std::unique_ptr<EpisodeSampler> sampler(const Config& settled, const EpisodeSplit& split, IdList kept,
                                                 EpisodeSampler::Settings settings, bool packer_cuts = false);

 protected:
  // The settings of split `name`'s sampler in this mode.
  virtual EpisodeSampler::Settings row_sampler_settings(const Config& settled, const std::string& name) const = 0;
  // Whether split `name`'s rows are packed at lengths that change (sampler's packer_cuts).
  virtual bool packed_rows_change_length(const Config&, const std::string&) const { return false; }
  // The split over `data` (episodes, windows, sampler and orders set), whose batches have
  // `shape`.
  virtual std::unique_ptr<DatasetSplit> split_over(const ResolvedOptions& settled, const std::string& name,
                                                   std::unique_ptr<SplitData> data, const detail::BatchShape& shape,
                                                   DatasetSplit::Description description) const = 0;
};

class EpisodeModeBuilder final : public EpisodeModes {
 public:
  // With truncation=split, rows are pieces cut at block_size + 1 (the other rules keep one
  // row per episode, so their fingerprints do not name the rule).
  void add_order_fields(const Config& settled, OrderFields& fields) const override;

  // What the batch source writes: the pad id, the row length, the chosen fields.
  static EpisodeBatchSource::Options source_options(const Config& settled, bool with_mask);

 private:
  EpisodeSampler::Settings row_sampler_settings(const Config& settled, const std::string& name) const override;
  std::unique_ptr<DatasetSplit> split_over(const ResolvedOptions& settled, const std::string& name,
                                           std::unique_ptr<SplitData> data, const detail::BatchShape& shape,
                                           DatasetSplit::Description description) const override;
};

}  // namespace tokenfeed
