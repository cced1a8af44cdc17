// Mixture weights from dataset sizes (docs/mixtures.md, "Weights from dataset sizes"):
// shares proportional to each source's token count to the power alpha (the mixture's
// `temperature`), optionally capped per source so that it repeats at most `max_epochs`
// epochs over a planned number of rows (UniMax), the excess redistributed, and rounded to
// exact decimal texts that MixtureSchedule takes as they are.
//
// Pure arithmetic: no files, no threads. Deterministic: IEEE double arithmetic in a fixed
// order, then an integer largest-remainder rounding, so the same inputs give the same
// texts on every platform whose std::pow is correctly rounded (glibc's is).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tokenfeed {

struct SizedSource {
  std::string name;                  // for messages
  std::uint64_t tokens = 0;          // tokens of its train split; 0: the source gets weight 0
  std::uint64_t rows_per_epoch = 0;  // rows of one epoch of its train split (for max_epochs)
  std::optional<double> max_epochs;  // UniMax cap; REQUIRES: > 0 and planned_rows given
};

struct WeightFromSize {
  std::string text;              // the share as an exact decimal with 6 decimals, e.g. "0.412300"
  std::uint64_t millionths = 0;  // the same share in units of 1e-6 (all sources sum to 10^6)
  bool capped = false;           // its share was capped by max_epochs
  // Epochs it repeats over the planned rows at its rounded share: planned_rows * share /
  // rows_per_epoch; nullopt without planned rows or when rows_per_epoch is 0.
  std::optional<double> planned_epochs;
};

// The number of decimals of every computed weight: shares are multiples of 10^-kShareDecimals
// summing to exactly 1, so a stage of computed weights has period at most 10^6 <= 2^22.
inline constexpr int kShareDecimals = 6;
inline constexpr std::uint64_t kShareUnits = 1'000'000;

// One weight per source, in order. alpha in [0, 1]; planned_rows = planned_steps x
// batch_size x world_size when any source has max_epochs. Throws Error(config) naming the
// sources when no source has tokens, or when the caps leave a share no uncapped source can
// take (every source with tokens capped, the caps summing to less than 1).
std::vector<WeightFromSize> weights_from_sizes(const std::vector<SizedSource>& sources, double alpha,
                                               std::optional<std::uint64_t> planned_rows);

}  // namespace tokenfeed
