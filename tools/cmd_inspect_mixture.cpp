// `tokenfeed inspect --config FILE --steps N`: what a mixture's first N steps hold, per
// stage: each source's share of rows, of real tokens and of trained tokens, and the epoch
// each source reaches, after the weights from dataset sizes when the weights are "auto".
// Reads the batches the loader would give this config's rank.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.hpp"
#include "every_field_config.hpp"
#include "inspect/mixture_sizes_report.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed::cli {
namespace {

struct Counts {
  std::uint64_t rows = 0, real = 0, trained = 0;
};

double share(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole);
}

// Input positions of row r that hold tokens (not the row's trailing padding, which the
// contract makes the row's last sequence, all of weight 0), and those with a loss weight.
Counts row_counts(const Batch& b, std::size_t r, std::size_t& sequence) {
  const std::size_t T = b.cols();
  const auto cu = b.cu_seqlens();
  const auto weights = b.token_weights();
  const std::size_t row_end = (r + 1) * T;
  std::size_t last_begin = r * T;
  while (sequence < b.num_sequences() && static_cast<std::size_t>(cu[sequence + 1]) <= row_end) {
    last_begin = static_cast<std::size_t>(cu[sequence]);
    ++sequence;
  }
  Counts c;
  c.rows = 1;
  bool last_weighted = false;
  for (std::size_t p = r * T; p < row_end; ++p) {
    if (weights[p] != 0.0f) {
      ++c.trained;
      if (p >= last_begin) last_weighted = true;
    }
  }
  const bool trailing_padding = !last_weighted && last_begin > r * T;
  c.real = trailing_padding ? last_begin - r * T : T;
  return c;
}

// Weights from dataset sizes, from the loader's own computation: per source its tokens, rows
// of an epoch, weight, whether max_epochs capped it, and the epochs it repeats over the
// planned steps and over the `steps` inspected (all ranks), at its weight.
void print_weights_from_sizes(const Config& config, const Config& resolved, std::uint64_t steps) {
  const std::vector<SizedWeight> weights = mixture_weights_from_sizes(config);
  if (weights.empty()) return;
  const double rows =
      static_cast<double>(steps) * static_cast<double>(resolved.batch_size) * static_cast<double>(resolved.world_size);
  std::printf("weights from dataset sizes: temperature %g", config.mixture_temperature.value_or(1.0));
  if (config.mixture_planned_steps)
    std::printf(", planned_steps %lld", static_cast<long long>(*config.mixture_planned_steps));
  std::printf("\n  %-16s %14s %12s %10s %6s %14s %14s\n", "source", "tokens", "rows/epoch", "weight", "capped",
              "epochs_planned", "epochs_steps");
  for (const SizedWeight& w : weights) {
    std::string planned = "-", inspected = "-";
    char number[64];
    if (w.weight.planned_epochs) {
      std::snprintf(number, sizeof number, "%.3f", *w.weight.planned_epochs);
      planned = number;
    }
    if (w.rows_per_epoch > 0) {
      std::snprintf(number, sizeof number, "%.3f",
                    rows * static_cast<double>(w.weight.millionths) / 1e6 / static_cast<double>(w.rows_per_epoch));
      inspected = number;
    }
    std::printf("  %-16s %14llu %12llu %10s %6s %14s %14s\n", w.name.c_str(), static_cast<unsigned long long>(w.tokens),
                static_cast<unsigned long long>(w.rows_per_epoch), w.weight.text.c_str(),
                w.weight.capped ? "yes" : "no", planned.c_str(), inspected.c_str());
  }
}

}  // namespace

// inspect reads every batch of the steps it describes: a count beyond this would run for
// hours (or, near 2^63, for ever) instead of answering.
constexpr long kMaxInspectSteps = 10'000'000;

void inspect_mixture(const std::string& config_file, long steps) {
  if (steps < 1 || steps > kMaxInspectSteps) {
    throw Error(ErrorKind::usage, "inspect --steps " + std::to_string(steps) + ": must be in [1, " +
                                      std::to_string(kMaxInspectSteps) +
                                      "] (inspect reads every batch of the steps it describes)");
  }
  Config config = config_reading_every_field(config_file);
  if (config.mixture.empty()) {
    throw Error(ErrorKind::usage, "inspect --config '" + config_file +
                                      "': the config has no <mixture>; inspect a single dataset by its directory");
  }
  config.audit_log_dir.clear();  // a look, not a run
  Loader loader(config);
  const std::vector<std::string> names = loader.source_names();
  // Stage s covers steps [first[s], first[s + 1]).
  std::vector<std::uint64_t> first{0};
  for (const MixtureStage& stage : config.stages) {
    if (stage.until_step) first.push_back(static_cast<std::uint64_t>(*stage.until_step));
  }
  const auto n = static_cast<std::uint64_t>(steps);
  std::vector<std::vector<Counts>> counts(first.size(), std::vector<Counts>(names.size()));
  std::size_t stage = 0;
  for (std::uint64_t step = 0; step < n; ++step) {
    while (stage + 1 < first.size() && step >= first[stage + 1]) ++stage;
    Batch b = loader.get_batch("train");
    std::size_t sequence = 0;
    for (std::size_t r = 0; r < b.rows(); ++r) {
      const Counts c = row_counts(b, r, sequence);
      Counts& into = counts[stage][static_cast<std::size_t>(b.source_ids()[r])];
      into.rows += c.rows;
      into.real += c.real;
      into.trained += c.trained;
    }
  }
  std::printf("mixture %s: %zu sources, %zu stages; the first %llu steps of rank %lld (%lld x %lld per batch)\n",
              config_file.c_str(), names.size(), first.size(), static_cast<unsigned long long>(n),
              static_cast<long long>(loader.config().rank), static_cast<long long>(config.batch_size),
              static_cast<long long>(config.block_size));
  print_weights_from_sizes(config, loader.config(), n);
  for (std::size_t s = 0; s < first.size(); ++s) {
    const std::uint64_t begin = first[s];
    if (begin >= n) {
      std::printf("stage %zu  from step %llu: not reached in %llu steps\n", s, static_cast<unsigned long long>(begin),
                  static_cast<unsigned long long>(n));
      continue;
    }
    const std::uint64_t end = s + 1 < first.size() ? std::min(first[s + 1], n) : n;
    std::printf("stage %zu  steps %llu..%llu\n", s, static_cast<unsigned long long>(begin),
                static_cast<unsigned long long>(end - 1));
    Counts total;
    for (const Counts& c : counts[s]) {
      total.rows += c.rows;
      total.real += c.real;
      total.trained += c.trained;
    }
    std::printf("  %-16s %10s %7s %14s %7s %14s %7s\n", "source", "rows", "share", "real_tokens", "share",
                "trained_tokens", "share");
    for (std::size_t i = 0; i < names.size(); ++i) {
      const Counts& c = counts[s][i];
      std::printf("  %-16s %10llu %6.2f%% %14llu %6.2f%% %14llu %6.2f%%\n", names[i].c_str(),
                  static_cast<unsigned long long>(c.rows), share(c.rows, total.rows),
                  static_cast<unsigned long long>(c.real), share(c.real, total.real),
                  static_cast<unsigned long long>(c.trained), share(c.trained, total.trained));
    }
  }
  std::printf("epochs after %llu steps (all ranks):\n", static_cast<unsigned long long>(n));
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto epoch = loader.source_epoch_after("train", i, n);
    if (epoch) {
      std::printf("  %-16s epoch %llu (%llu epochs begun)\n", names[i].c_str(), static_cast<unsigned long long>(*epoch),
                  static_cast<unsigned long long>(*epoch + 1));
    } else {
      std::printf("  %-16s random sampling: no epochs\n", names[i].c_str());
    }
  }
}

}  // namespace tokenfeed::cli
