// StreamModeBuilder: token_stream's builder (mode_builder.hpp). A split is a token stream
// (NAME.bin, or the *.bin / *.npy files of NAME/) cut into windows of block_size + 1
// tokens: an epoch order of window ids, or random window starts; document_aware rows
// restart positions at every end-of-text id. With val_fraction, train and val are the
// documents of train's files not chosen and chosen by hash (document_split.hpp).
//
// Thread-safety: as ModeBuilder.
#pragma once

#include <memory>
#include <string>

#include "modes/token_stream_batch_source.hpp"
#include "splits/mode_builder.hpp"

namespace tokenfeed {

class StreamModeBuilder final : public ModeBuilder {
 public:
  // block_size: windows are carved at block_size + 1.
  void add_order_fields(const Config& settled, OrderFields& fields) const override;
  std::unique_ptr<DatasetSplit> open_split(const ResolvedOptions& settled, const std::string& name) const override;
  // Train, and val when the dataset has it; the token dtype, when not given, is train's
  // files' common one.
  OpenedSplits open_splits(ResolvedOptions& settled) const override;

  // How the batch source cuts and writes windows.
  // `schedule`: the split's shape schedule (null: none), whose block sizes the rows may take.
  static TokenStreamBatchSource::Options source_options(const Config& settled, const ShapeSchedule* schedule);
};

}  // namespace tokenfeed
