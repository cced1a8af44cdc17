// mixture_report: what a mixture's first N steps hold, read from the batches a loader over
// the config gives this rank (`tokenfeed inspect --config FILE --steps N` prints it,
// Python's tokenfeed.inspect(config, steps=N) returns it as a dict): per stage, each
// source's share of rows, of real tokens and of trained tokens; the epoch each source
// reaches; and, when the weights are "auto", the weights from dataset sizes with the figures
// they come from (the loader's own computation, mixture_sizes_report).
//
// Thread-safety: a free function; it runs a Loader (its threads end before it returns).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mixture/mixture_sizes.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

// The report reads every batch of the steps it describes: a count beyond this would run for
// hours (or, near 2^63, for ever) instead of answering.
constexpr std::int64_t kMaxInspectSteps = 10'000'000;

// One source's rows in one stage, on this rank. Shares are percentages of the stage's
// totals (0 when the total is 0).
struct MixtureSourceShare {
  std::uint64_t rows = 0;
  // Input positions that hold tokens: a row's trailing padding (the contract makes it the
  // row's last sequence, all of weight 0) is not counted.
  std::uint64_t real_tokens = 0;
  // Input positions with a non-zero loss weight.
  std::uint64_t trained_tokens = 0;
  double row_share = 0.0;
  double real_share = 0.0;
  double trained_share = 0.0;
};

// A stage of the schedule (the sources' own weights are stage 0 when there are no stages).
struct MixtureStageFigures {
  std::uint64_t first_step = 0;
  // The last step of the stage that was read; absent when the stage begins after them.
  std::optional<std::uint64_t> last_step;
  std::vector<MixtureSourceShare> sources;  // by source index; empty when not reached
};

// A source's weight from dataset sizes (SizedWeight: tokens, rows of an epoch, the weight,
// whether max_epochs capped it, the epochs over planned_steps) and the epochs that weight
// repeats over the inspected steps (all ranks); absent when the source has no epochs.
struct MixtureSizedSource {
  SizedWeight sized;
  std::optional<double> epochs_in_steps;
};

struct MixtureWeightsFromSizes {
  double temperature = 1.0;
  std::optional<std::int64_t> planned_steps;
  std::vector<MixtureSizedSource> sources;
};

struct MixtureReport {
  std::vector<std::string> sources;  // the sources' names, in declaration order
  std::uint64_t steps = 0;           // the steps read
  std::int64_t rank = 0;             // the rank whose batches were read (settled: never "env")
  std::int64_t batch_size = 0;
  std::int64_t block_size = 0;
  // Present when the config's weights are "auto".
  std::optional<MixtureWeightsFromSizes> weights_from_sizes;
  std::vector<MixtureStageFigures> stages;
  // Per source: the epoch it is in after `steps` (all ranks); absent when it samples at
  // random (no epochs).
  std::vector<std::optional<std::uint64_t>> epochs;
};

// Throws Error(usage) "STEPS_OPTION N: must be in [1, 10000000] (...)" for a count outside
// [1, kMaxInspectSteps]; `steps_option` names the count as the caller took it ("inspect
// --steps" for the command), so that a caller can refuse it before reading its config.
void check_inspect_steps(std::int64_t steps, std::string_view steps_option);

// Reads the first `steps` train batches of a loader over `config` (every field read, no
// audit log: a look, not a run). Throws check_inspect_steps' Error(usage), Error(usage)
// for a config without a mixture, and the errors a Loader over the config throws.
MixtureReport mixture_report(Config config, std::int64_t steps, std::string_view steps_option);

}  // namespace tokenfeed
