#include "inspect/mixture_report.hpp"

#include <algorithm>

#include "inspect/mixture_sizes_report.hpp"
#include "splits/shape_plan.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed {
namespace {

double share(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

// Row r's counts (shares left 0): its real input positions (not the row's trailing padding,
// which the contract makes the row's last sequence, all of weight 0) and those with a loss
// weight. `sequence` is the first sequence not yet passed, carried from row to row.
MixtureSourceShare row_counts(const Batch& b, std::size_t r, std::size_t& sequence) {
  const std::size_t T = b.cols();
  const auto cu = b.cu_seqlens();
  const auto weights = b.token_weights();
  const std::size_t row_end = (r + 1) * T;
  std::size_t last_begin = r * T;
  while (sequence < b.num_sequences() && static_cast<std::size_t>(cu[sequence + 1]) <= row_end) {
    last_begin = static_cast<std::size_t>(cu[sequence]);
    ++sequence;
  }
  MixtureSourceShare c;
  c.rows = 1;
  bool last_weighted = false;
  for (std::size_t p = r * T; p < row_end; ++p) {
    if (weights[p] != 0.0f) {
      ++c.trained_tokens;
      if (p >= last_begin) last_weighted = true;
    }
  }
  const bool trailing_padding = !last_weighted && last_begin > r * T;
  c.real_tokens = trailing_padding ? last_begin - r * T : T;
  return c;
}

// The stages' first steps (stage s covers [first[s], first[s + 1])), their counts left 0.
std::vector<MixtureStageFigures> empty_stages(const Config& config, std::size_t sources) {
  std::vector<MixtureStageFigures> stages(1);
  for (const MixtureStage& stage : config.stages) {
    if (stage.until_step) stages.emplace_back().first_step = static_cast<std::uint64_t>(*stage.until_step);
  }
  for (MixtureStageFigures& stage : stages) stage.sources.resize(sources);
  return stages;
}

// Each source's rows, real and trained tokens per stage over the first `steps` batches.
void count_rows(Loader& loader, std::uint64_t steps, std::vector<MixtureStageFigures>& stages) {
  std::size_t stage = 0;
  for (std::uint64_t step = 0; step < steps; ++step) {
    while (stage + 1 < stages.size() && step >= stages[stage + 1].first_step) ++stage;
    Batch b = loader.get_batch("train");
    std::size_t sequence = 0;
    for (std::size_t r = 0; r < b.rows(); ++r) {
      const MixtureSourceShare c = row_counts(b, r, sequence);
      MixtureSourceShare& into = stages[stage].sources[static_cast<std::size_t>(b.source_ids()[r])];
      into.rows += c.rows;
      into.real_tokens += c.real_tokens;
      into.trained_tokens += c.trained_tokens;
    }
  }
}

// The stages' last steps read and their shares; a stage not reached keeps no sources.
void settle_stages(std::uint64_t steps, std::vector<MixtureStageFigures>& stages) {
  for (std::size_t s = 0; s < stages.size(); ++s) {
    MixtureStageFigures& stage = stages[s];
    if (stage.first_step >= steps) {
      stage.sources.clear();
      continue;
    }
    stage.last_step = (s + 1 < stages.size() ? std::min(stages[s + 1].first_step, steps) : steps) - 1;
    MixtureSourceShare total;
    for (const MixtureSourceShare& c : stage.sources) {
      total.rows += c.rows;
      total.real_tokens += c.real_tokens;
      total.trained_tokens += c.trained_tokens;
    }
    for (MixtureSourceShare& c : stage.sources) {
      c.row_share = share(c.rows, total.rows);
      c.real_share = share(c.real_tokens, total.real_tokens);
      c.trained_share = share(c.trained_tokens, total.trained_tokens);
    }
  }
}

// Weights from dataset sizes, from the loader's own computation, with the epochs each
// weight repeats over the inspected steps (all ranks: `resolved` is the loader's config).
std::optional<MixtureWeightsFromSizes> weights_from_sizes(const Config& config, const Config& resolved,
                                                          std::uint64_t steps) {
  std::vector<SizedWeight> weights = mixture_weights_from_sizes(config);
  if (weights.empty()) return std::nullopt;
  // The global rows of those steps: a batch-size schedule's sizes in sequence, or the
  // constant global batch.
  const double rows = static_cast<double>(train_steps(resolved).rows_before(steps));
  MixtureWeightsFromSizes figures;
  figures.temperature = config.mixture_temperature.value_or(1.0);
  figures.planned_steps = config.mixture_planned_steps;
  for (SizedWeight& w : weights) {
    MixtureSizedSource& source = figures.sources.emplace_back();
    if (w.rows_per_epoch > 0) {
      source.epochs_in_steps =
          rows * static_cast<double>(w.weight.millionths) / 1e6 / static_cast<double>(w.rows_per_epoch);
    }
    source.sized = std::move(w);
  }
  return figures;
}

}  // namespace

void check_inspect_steps(std::int64_t steps, std::string_view steps_option) {
  if (steps < 1 || steps > kMaxInspectSteps) {
    throw Error(ErrorKind::usage, std::string(steps_option) + " " + std::to_string(steps) + ": must be in [1, " +
                                      std::to_string(kMaxInspectSteps) +
                                      "] (inspect reads every batch of the steps it describes)");
  }
}

MixtureReport mixture_report(Config config, std::int64_t steps, std::string_view steps_option) {
  check_inspect_steps(steps, steps_option);
  if (config.mixture.empty()) throw Error(ErrorKind::usage, "the config has no mixture");
  config.fields = kEveryBatchField;  // the counts read token_weights and cu_seqlens
  config.audit_log_dir.clear();      // a look, not a run
  MixtureReport report;
  report.steps = static_cast<std::uint64_t>(steps);
  report.batch_size = config.batch_size;
  report.block_size = config.block_size;
  Loader loader(config);
  report.sources = loader.source_names();
  report.rank = loader.config().rank;
  report.stages = empty_stages(config, report.sources.size());
  count_rows(loader, report.steps, report.stages);
  settle_stages(report.steps, report.stages);
  report.weights_from_sizes = weights_from_sizes(config, loader.config(), report.steps);
  for (std::size_t i = 0; i < report.sources.size(); ++i) {
    report.epochs.push_back(loader.source_epoch_after("train", i, report.steps));
  }
  return report;
}

}  // namespace tokenfeed
