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
#include <vector>

#include "dataset/dataset_metadata.hpp"
#include "audit/audit_trail.hpp"
#include "splits/fingerprint.hpp"
#include "splits/loader_split.hpp"
#include "splits/weight_changes.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"

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

  // Weight changes from the trainer (a mixture's: Mixture, weight_changes.hpp). A single
  // dataset: earliest_weight_step and set_mixture_weights throw Error(config), and it has
  // no changes. set_mixture_weights and commit_weights stop and restart the train split's
  // pipeline under `gate`'s mutex; the trainer thread calls them.
  virtual std::uint64_t earliest_weight_step() const;
  virtual void set_mixture_weights(const std::map<std::string, std::string>& weights, std::uint64_t at_step,
                                   PipelineGate& gate);
  virtual const std::vector<WeightChange>& weight_changes() const noexcept;
  // load_state: what to commit so that this loader has a state's change history. nullopt
  // when it has it already (or the state has none and this loader none); the state's
  // changes when this loader has none. Throws Error(state) when this loader made other
  // changes, or for changes no loader makes. Changes nothing.
  virtual std::optional<PreparedWeights> adopt_state_changes(const std::vector<WeightChange>& state_changes) const;
  virtual void commit_weights(PreparedWeights prepared, PipelineGate& gate);

  // Every split, by name.
  const std::map<std::string, LoaderSplit*, std::less<>>& splits() const noexcept { return splits_; }
  // Throws Error(usage) for a split the dataset does not have.
  LoaderSplit& find(std::string_view name) const;
  const OrderFields& order_fields() const noexcept { return order_fields_; }
  const std::string& fingerprint() const noexcept { return fingerprint_; }
  AuditTrail& audit() const noexcept { return *audit_; }
  // Where this process sits in the parallel layout (resolve_options settled it).
  const ParallelLayout& layout() const noexcept { return layout_; }

 protected:
  std::map<std::string, LoaderSplit*, std::less<>> splits_;  // owned by the subclass
  OrderFields order_fields_;
  std::string fingerprint_;
  std::unique_ptr<AuditTrail> audit_;
  ParallelLayout layout_;
};

}  // namespace tokenfeed
