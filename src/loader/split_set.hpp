// SplitSet: what a Loader reads, opened: the settled config, the splits by name, what
// their order depends on (the fields and their fingerprint) and the audit trail. A single
// dataset (SingleDataset, single_dataset.hpp) or a mixture of them (Mixture, mixture.hpp).
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

#include "dataset/dataset_metadata.hpp"
#include "loader/audit_trail.hpp"
#include "loader/fingerprint.hpp"
#include "loader/loader_split.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

class SplitSet {
 public:
  virtual ~SplitSet();

  virtual const Config& config() const noexcept = 0;
  // dataset_metadata.json as read (empty for a mixture and a dataset without it).
  virtual const DatasetMetadata& metadata() const noexcept = 0;
  // A mixture: the epoch source `source` is in after `steps` batches of `split` (nullopt
  // without epochs). Throws Error(usage) for a single dataset or a bad index.
  virtual std::optional<std::uint64_t> source_epoch_after(std::string_view split, std::size_t source,
                                                          std::uint64_t steps) const;

  // Every split, by name.
  const std::map<std::string, LoaderSplit*, std::less<>>& splits() const noexcept { return splits_; }
  // Throws Error(usage) for a split the dataset does not have.
  LoaderSplit& find(std::string_view name) const;
  const OrderFields& order_fields() const noexcept { return order_fields_; }
  const std::string& fingerprint() const noexcept { return fingerprint_; }
  AuditTrail& audit() const noexcept { return *audit_; }

 protected:
  std::map<std::string, LoaderSplit*, std::less<>> splits_;  // owned by the subclass
  OrderFields order_fields_;
  std::string fingerprint_;
  std::unique_ptr<AuditTrail> audit_;
};

}  // namespace tokenfeed
