#include "mixture/mixture_sizes.hpp"

#include <algorithm>
#include <cstdio>

#include "splits/resolved_options.hpp"
#include "splits/shape_plan.hpp"
#include "tokenfeed/error.hpp"
#include "util/checked_math.hpp"

namespace tokenfeed {

bool has_weights_from_sizes(const Config& config) {
  return std::any_of(config.mixture.begin(), config.mixture.end(),
                     [](const MixtureSource& s) { return s.weight == "auto"; });
}

std::vector<SizedWeight> weights_from_dataset_sizes(const Config& config,
                                                    const std::vector<const DatasetSplit*>& trains) {
  std::vector<SizedSource> sources;
  for (std::size_t i = 0; i < config.mixture.size(); ++i) {
    const MixtureSource& m = config.mixture[i];
    const DatasetSplit& train = *trains[i];
    SizedSource s{m.name, train.description().figures.tokens, 0, m.max_epochs};
    if (train.epochs() != Epochs::none) s.rows_per_epoch = train.source().batches_in_epoch(0);
    if (m.max_epochs && train.epochs() == Epochs::none) {
      throw Error(ErrorKind::config, "mixture source '" + m.name +
                                         "': max_epochs with batch_sampling_mode=random, which has no epochs to "
                                         "count; sample it in epochs or drop max_epochs");
    }
    sources.push_back(std::move(s));
  }
  std::optional<std::uint64_t> planned_rows;
  if (config.mixture_planned_steps) {
    // The rows of the planned steps on the train split's step axis (a batch-size schedule's
    // sizes, or the constant global batch).
    const auto steps = static_cast<std::uint64_t>(*config.mixture_planned_steps);
    const auto schedule = shape_schedule_of(config, "train");
    planned_rows = schedule
                       ? schedule->rows_before(steps)
                       : checked_product(steps, global_batch_size(config), "planned_steps x batch_size x world_size");
  }
  const std::vector<WeightFromSize> weights =
      weights_from_sizes(sources, config.mixture_temperature.value_or(1.0), planned_rows);
  std::vector<SizedWeight> out;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    out.push_back(SizedWeight{sources[i].name, sources[i].tokens, sources[i].rows_per_epoch, weights[i]});
  }
  return out;
}

std::string sized_weights_text(const Config& config, const std::vector<SizedWeight>& weights) {
  char number[64];
  std::snprintf(number, sizeof number, "%g", config.mixture_temperature.value_or(1.0));
  std::string text = " from_sizes(temperature=" + std::string(number);
  if (config.mixture_planned_steps) text += " planned_steps=" + std::to_string(*config.mixture_planned_steps);
  for (const SizedWeight& w : weights) {
    text += " " + w.name + ":tokens=" + std::to_string(w.tokens);
    if (w.weight.planned_epochs) {
      std::snprintf(number, sizeof number, "%.3f", *w.weight.planned_epochs);
      text += " epochs=" + std::string(number);
    }
    if (w.weight.capped) text += " capped";
  }
  return text + ")";
}

}  // namespace tokenfeed
