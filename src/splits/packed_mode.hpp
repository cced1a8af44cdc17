// PackedModeBuilder: sft_packed's builder (mode_builder.hpp). Each epoch's episode order
// (one sampler over the kept episodes, or pieces, with one id per batch and one rank) is
// packed into rows of block_size; a batch takes this rank's rows of the global batch, and
// epochs of different row counts are walked in order (PackedEpochsSplit).
//
// Thread-safety: as ModeBuilder.
#pragma once

#include <memory>
#include <string>

#include "modes/packed_batch_source.hpp"
#include "splits/episode_modes.hpp"

namespace tokenfeed {

class PackedModeBuilder final : public EpisodeModes {
 public:
  // Rows depend on how episodes are cut and on the row length, and on the context-parallel
  // padding (named only with it, so that a config without it keeps its fingerprint).
  void add_order_fields(const Config& settled, OrderFields& fields) const override;

  // The sampler only orders each epoch's episodes (one id per batch, one rank, nothing
  // dropped); rows, not episodes, make up a batch.
  static EpisodeSampler::Settings order_settings(const Config& settled, const std::string& split);
  // How split `split`'s rows are packed and dealt to this rank.
  static PackedBatchSource::Options packing_options(const Config& settled, const std::string& split, bool with_mask);

 private:
  EpisodeSampler::Settings row_sampler_settings(const Config& settled, const std::string& name) const override {
    return order_settings(settled, name);
  }
  bool packed_rows_change_length(const Config& settled, const std::string& name) const override;
  std::unique_ptr<DatasetSplit> split_over(const ResolvedOptions& settled, const std::string& name,
                                           std::unique_ptr<SplitData> data, const detail::BatchShape& shape,
                                           DatasetSplit::Description description) const override;
};

}  // namespace tokenfeed
