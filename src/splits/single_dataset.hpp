// SingleDataset: one dataset opened for a Loader (or as a mixture's source): its config
// settled against the dataset and its splits (the dtypes and use_loss_mask only the split
// files tell), each split opened by its mode's builder (mode_builder.hpp), the order fields and
// fingerprint, the memory bound checked, and at open the audit log's dataset_load record and
// the one info line.
//
// Thread-safety: as SplitSet.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "splits/dataset_split.hpp"
#include "splits/mode_builder.hpp"
#include "splits/resolved_options.hpp"
#include "splits/split_set.hpp"

namespace tokenfeed {

class SingleDataset final : public SplitSet {
 public:
  // Opens every split the dataset has. Throws Error as the Loader's constructor.
  explicit SingleDataset(ResolvedOptions settled);

  const Config& config() const noexcept override { return settled_.config; }
  const DatasetMetadata& metadata() const noexcept override { return settled_.metadata; }
  bool has_split(const std::string& name) const { return own_.count(name) != 0; }
  // REQUIRES: has_split(name).
  const DatasetSplit& split(const std::string& name) const { return *own_.at(name); }

 private:
  // The config settled against the dataset; what the opened splits settle (an inferred
  // dtype, use_loss_mask=auto) is written back into it by open_splits.
  ResolvedOptions settled_;
  OpenedSplits own_;

  void open_splits();
  // What the order depends on (order_fields_) and its hash (fingerprint_).
  void make_fingerprint();
  // The audit log's dataset_load record, and the one info line at open.
  void announce_open();
};

}  // namespace tokenfeed
