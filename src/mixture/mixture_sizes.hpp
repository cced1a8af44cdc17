// Weights from dataset sizes for a mixture's open: each source's train-split figures
// (tokens, rows of one epoch) fed to weights_from_sizes (sampling/mixture_weights), the
// one computation the loader and `tokenfeed inspect` use (docs/mixtures.md, "Weights from
// dataset sizes").
//
// Thread-safety: free functions over immutable splits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "splits/dataset_split.hpp"
#include "sampling/mixture_weights.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

// A source's weight from dataset sizes, with the figures it came from.
struct SizedWeight {
  std::string name;
  std::uint64_t tokens = 0;          // every token of its train split (the split line's tokens=)
  std::uint64_t rows_per_epoch = 0;  // rows of its train split's epoch 0; 0 in random mode
  WeightFromSize weight;
};

// True when the mixture's source weights are "auto" (validated: then all are).
bool has_weights_from_sizes(const Config& config);

// One per source of config.mixture, trains[i] being source i's train split. Throws
// Error(config) naming the source for max_epochs on a source sampled at random (no epochs),
// and weights_from_sizes' errors. REQUIRES: has_weights_from_sizes(config); config
// validated; trains.size() == config.mixture.size().
std::vector<SizedWeight> weights_from_dataset_sizes(const Config& config,
                                                    const std::vector<const DatasetSplit*>& trains);

// For the open line: " from_sizes(temperature=A planned_steps=N chat:tokens=T epochs=E capped ...)".
std::string sized_weights_text(const Config& config, const std::vector<SizedWeight>& weights);

}  // namespace tokenfeed
