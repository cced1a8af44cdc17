// SplitSet: what a Loader reads, opened: the settled config, the splits by name, what
// their order depends on (the fields and their fingerprint) and the audit trail. A single
// dataset (SingleDataset, single_dataset.hpp) or a mixture of them (Mixture, mixture.hpp);
// what only a mixture does (its sources' epochs, the trainer's weight changes) is Mixture's
// own, which the Loader reaches through the Mixture it opened.
//
// Thread-safety: constant after construction but for the splits' positions and pipelines
// (LoaderSplit) and the config the opener settles; the trainer thread uses it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dataset/dataset_metadata.hpp"
#include "audit/audit_trail.hpp"
#include "splits/fingerprint.hpp"
#include "splits/loader_split.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed {

class SplitSet {
 public:
  virtual ~SplitSet();

  virtual const Config& config() const noexcept = 0;
  // dataset_metadata.json as read (empty for a mixture and a dataset without it).
  virtual const DatasetMetadata& metadata() const noexcept = 0;
  // Every split, by name.
  const std::map<std::string, LoaderSplit*, std::less<>>& splits() const noexcept { return splits_; }
  // Throws Error(usage) for a split the dataset does not have.
  LoaderSplit& find(std::string_view name) const;
  const OrderFields& order_fields() const noexcept { return order_fields_; }
  const std::string& fingerprint() const noexcept { return fingerprint_; }
  // The fingerprints an earlier tokenfeed gave this same data and order (before episode
  // content was hashed whatever its shards), which a state it saved holds: taken as
  // fingerprint(). Empty when they are the same.
  const std::vector<std::string>& earlier_fingerprints() const noexcept { return earlier_fingerprints_; }
  AuditTrail& audit() const noexcept { return *audit_; }
  // Where this process sits in the parallel layout (resolve_options settled it).
  const ParallelLayout& layout() const noexcept { return layout_; }

 protected:
  std::map<std::string, LoaderSplit*, std::less<>> splits_;  // owned by the subclass
  OrderFields order_fields_;
  std::string fingerprint_;
  std::vector<std::string> earlier_fingerprints_;
  std::unique_ptr<AuditTrail> audit_;
  ParallelLayout layout_;
};

}  // namespace tokenfeed
