#include "splits/weight_changes.hpp"

#include <algorithm>

#include "tokenfeed/error.hpp"

namespace tokenfeed {

std::string canonical_weight_text(const ExactWeight& weight) {
  std::uint64_t mantissa = weight.mantissa;
  int decimals = weight.decimals;
  while (decimals > 0 && mantissa % 10 == 0) {
    mantissa /= 10;
    --decimals;
  }
  std::uint64_t scale = 1;
  for (int d = 0; d < decimals; ++d) scale *= 10;
  std::string text = std::to_string(mantissa / scale);
  if (decimals > 0) {
    std::string fraction = std::to_string(mantissa % scale);
    text += "." + std::string(static_cast<std::size_t>(decimals) - fraction.size(), '0') + fraction;
  }
  return text;
}

WeightChange make_weight_change(const std::map<std::string, std::string>& weights, std::uint64_t step,
                                const std::vector<std::string>& names) {
  const std::string who = "set_mixture_weights(at_step=" + std::to_string(step) + ")";
  if (weights.empty()) throw Error(ErrorKind::config, who + " names no source; give at least one source's weight");
  WeightChange change;
  change.step = step;
  for (const auto& [name, text] : weights) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      std::string known;
      for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
      throw Error(ErrorKind::config, who + ": unknown source '" + name + "' (the mixture's sources: " + known + ")");
    }
    const std::optional<ExactWeight> weight = parse_mixture_weight(text);
    if (!weight) {
      throw Error(ErrorKind::config, who + ": weight '" + text + "' of source '" + name +
                                         "' is not a non-negative integer or decimal (at most 9 digits before "
                                         "the point and 6 after)");
    }
    change.weights[name] = canonical_weight_text(*weight);
  }
  return change;
}

std::string weights_text(const WeightChange& change) {
  std::string text;
  for (const auto& [name, weight] : change.weights) text += (text.empty() ? "" : ",") + name + "=" + weight;
  return text;
}

MergedStages stages_with_changes(const MixtureSchedule& config_schedule, const std::vector<WeightChange>& changes,
                                 const std::vector<std::string>& names) {
  std::vector<const WeightChange*> sorted;
  for (const WeightChange& change : changes) sorted.push_back(&change);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const WeightChange* a, const WeightChange* b) { return a->step < b->step; });
  // The stages as (first step, full weights, name), in step order: a config stage first
  // on a tie (stage 0 starts at step 0, so there is always one before any change).
  MergedStages merged;
  std::vector<MixtureSchedule::StageSpec>& out = merged.specs;
  std::vector<std::uint64_t> firsts;
  std::size_t stage = 0;
  std::size_t next = 0;
  while (stage < config_schedule.stages() || next < sorted.size()) {
    const bool config_first = stage < config_schedule.stages() &&
                              (next == sorted.size() || config_schedule.stage_first_step(stage) <= sorted[next]->step);
    MixtureSchedule::StageSpec spec;
    std::string where;
    std::uint64_t first = 0;
    if (config_first) {
      first = config_schedule.stage_first_step(stage);
      spec.weights = config_schedule.stage_weight_texts(stage);
      where = "mixture stage " + std::to_string(stage);
      ++stage;
    } else {
      const WeightChange& change = *sorted[next++];
      first = change.step;
      spec.weights = out.back().weights;  // the weights in effect at its step
      for (const auto& [name, weight] : change.weights) {
        spec.weights[static_cast<std::size_t>(std::find(names.begin(), names.end(), name) - names.begin())] = weight;
      }
      where = "the weights from step " + std::to_string(first) + " (set_mixture_weights)";
    }
    if (!firsts.empty() && firsts.back() == first) {
      out.back() = std::move(spec);  // the same step: the later one applies over it
      merged.names.back() = std::move(where);
    } else {
      if (!out.empty()) out.back().until = first;
      firsts.push_back(first);
      out.push_back(std::move(spec));
      merged.names.push_back(std::move(where));
    }
  }
  return merged;
}

void set_change_fields(OrderFields& order, const std::vector<WeightChange>& changes) {
  const std::string prefix = kWeightChangeField;
  for (auto it = order.lower_bound(prefix); it != order.end() && it->first.rfind(prefix, 0) == 0;) {
    it = order.erase(it);
  }
  for (std::size_t i = 0; i < changes.size(); ++i) {
    order[prefix + std::to_string(i)] = "step=" + std::to_string(changes[i].step) + " " + weights_text(changes[i]);
  }
}

}  // namespace tokenfeed
