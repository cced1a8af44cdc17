#include "config/mixture_schema.hpp"

#include <algorithm>
#include <iterator>

#include "config/config_values.hpp"
#include "config/stage_list.hpp"
#include "sampling/mixture_schedule.hpp"
#include "tokenfeed/error.hpp"
#include "util/shortest_text.hpp"

namespace tokenfeed {
namespace {

[[noreturn]] void config_error(const std::string& message) { throw Error(ErrorKind::config, message); }

// The per-dataset keys a mixture source may set; the rest are the loader's (shape,
// threads, depth, rank, the audit log) or single-dataset only (epoch_drop_last).
constexpr std::string_view kSourceKeys[] = {
    "dataset_dir",        "dataset_mode",   "batch_sampling_mode", "epoch_seed", "epoch_shuffle",
    "episode_min_tokens", "document_aware", "eos_token_id",        "truncation", "token_dtype",
    "mask_dtype",         "pack_lookahead", "val_prefix"};

bool is_source_key(std::string_view key) {
  return std::find(std::begin(kSourceKeys), std::end(kSourceKeys), key) != std::end(kSourceKeys);
}

std::string source_keys_text() {
  std::string text;
  for (const std::string_view key : kSourceKeys) text += (text.empty() ? "" : ", ") + std::string(key);
  return text;
}

// The source that `record` describes (source `index` of the mixture).
MixtureSource read_source(const ConfigRecord& record, std::size_t index, const std::filesystem::path& base_dir) {
  MixtureSource source;
  for (const auto& [key, text] : record.keys) {
    if (key == "name") source.name = std::string(trim_config_text(text));
  }
  const std::string where = mixture_source_where(index, source.name);
  if (source.name.empty()) config_error(where + " has no name");
  refuse_repeated_keys(where, record);
  bool has_weight = false;
  for (const auto& [key, text] : record.keys) {
    if (key == "name") continue;
    if (key == "weight") {
      source.weight = std::string(trim_config_text(text));
      has_weight = true;
      continue;
    }
    if (key == "max_epochs") {
      try {
        source.max_epochs = parse_config_number(key, text);
      } catch (const Error& e) {
        config_error(where + ": " + e.what());
      }
      continue;
    }
    const std::string_view trimmed = trim_config_text(text);
    if (key == "dataset_dir" && !trimmed.empty() && std::filesystem::path(std::string(trimmed)).is_relative()) {
      source.keys.emplace_back(key, (base_dir / std::string(trimmed)).lexically_normal().string());
      continue;
    }
    source.keys.emplace_back(key, text);
  }
  if (!has_weight) config_error(where + " has no weight");
  return source;
}

// The rules of weights from dataset sizes (docs/mixtures.md): "auto" weights need a
// temperature in [0, 1] and are all or nothing; max_epochs (> 0) is for auto weights and
// needs planned_steps (> 0); neither mixture attribute is given for nothing; stages give
// explicit weights only.
void validate_weights_from_sizes(const Config& c) {
  const auto is_auto = [](const MixtureSource& s) { return s.weight == "auto"; };
  const bool any_auto = std::any_of(c.mixture.begin(), c.mixture.end(), is_auto);
  const bool any_cap = std::any_of(c.mixture.begin(), c.mixture.end(), [](const auto& s) { return s.max_epochs; });
  if (c.mixture_temperature && !(*c.mixture_temperature >= 0.0 && *c.mixture_temperature <= 1.0)) {
    config_error(
        "mixture temperature must be in [0, 1] (the exponent of each source's token count: 0 uniform, 1 "
        "proportional to size), got " +
        shortest_text(*c.mixture_temperature));
  }
  if (c.mixture_planned_steps && *c.mixture_planned_steps <= 0) {
    config_error("mixture planned_steps must be > 0, got " + std::to_string(*c.mixture_planned_steps));
  }
  for (const MixtureSource& source : c.mixture) {
    const std::string who = "mixture source '" + source.name + "'";
    if (is_auto(source) && !c.mixture_temperature) {
      config_error(who + ": weight 'auto' needs <mixture temperature=\"A\"> (mixture_temperature in a mapping)");
    }
    if (!is_auto(source) && any_auto) {
      config_error(who + ": weight '" + source.weight +
                   "' next to 'auto' weights; with weights from dataset sizes every source's weight is 'auto'");
    }
    if (!source.max_epochs) continue;
    if (!(*source.max_epochs > 0.0)) {
      config_error(who + ": max_epochs must be > 0, got " + shortest_text(*source.max_epochs));
    }
    if (!is_auto(source))
      config_error(who + ": max_epochs caps a weight 'auto' only; its weight is '" + source.weight + "'");
    if (!c.mixture_planned_steps) {
      config_error(who +
                   ": max_epochs needs <mixture planned_steps=\"N\"> (mixture_planned_steps in a mapping), "
                   "the steps the epochs are counted over");
    }
  }
  if (c.mixture_temperature && !any_auto) config_error("mixture temperature is given but no source has weight 'auto'");
  if (c.mixture_planned_steps && !any_cap) config_error("mixture planned_steps is given but no source has max_epochs");
  for (std::size_t s = 0; s < c.stages.size(); ++s) {
    for (const auto& [name, weight] : c.stages[s].weights) {
      if (weight == "auto") {
        config_error("mixture stage " + std::to_string(s) + ": weight 'auto' of source '" + name +
                     "': weights from dataset sizes are for <source> weights only; a stage gives explicit weights");
      }
    }
  }
}

// Each source's name (unique), weight and keys (a source's own, each value as the key
// table reads it, and a dataset_dir).
void validate_sources(const Config& c) {
  std::vector<std::string> names;
  for (const MixtureSource& source : c.mixture) {
    const std::string who = "mixture source '" + source.name + "'";
    if (source.name.empty()) config_error("a mixture source has no name");
    if (std::find(names.begin(), names.end(), source.name) != names.end()) {
      config_error(who + " is declared twice; source names must be unique");
    }
    names.push_back(source.name);
    if (source.weight != "auto" && !parse_mixture_weight(source.weight)) {
      config_error(
          who + ": weight '" + source.weight +
          "' is not 'auto' or a non-negative integer or decimal (at most 9 digits before the point and 6 after)");
    }
    Config probe;
    bool has_dir = false;
    for (const auto& [key, value] : source.keys) {
      if (!is_source_key(key)) {
        config_error(who + ": unknown or loader-wide attribute '" + key + "' (a source may set: " + source_keys_text() +
                     ")");
      }
      try {
        set_config_value(probe, key, value);
      } catch (const Error& e) {
        config_error(who + ": " + e.what());
      }
      if (key == "dataset_dir") has_dir = !probe.dataset_dir.empty();
    }
    if (!has_dir) config_error(who + " has no dataset_dir");
  }
}

// Each stage's weights name declared sources with explicit weights; the ends are
// stage_list's rule.
void validate_stages(const Config& c) {
  std::optional<std::int64_t> previous_end;
  for (std::size_t s = 0; s < c.stages.size(); ++s) {
    const MixtureStage& stage = c.stages[s];
    const std::string where = mixture_stage_where(s);
    for (const auto& entry : stage.weights) {
      const std::string& name = entry.first;
      const std::string& weight = entry.second;
      const auto declared = [&](const MixtureSource& source) { return source.name == name; };
      if (std::none_of(c.mixture.begin(), c.mixture.end(), declared)) {
        config_error(where + ": a weight names source '" + name + "', which the mixture does not declare");
      }
      if (!parse_mixture_weight(weight)) {
        config_error(where + ": weight '" + weight + "' of source '" + name +
                     "' is not a non-negative integer or decimal (at most 9 digits before the point and 6 after)");
      }
    }
    validate_stage_end("mixture", s, c.stages.size(), stage.until_step, previous_end);
    previous_end = stage.until_step;
  }
}

}  // namespace

std::string mixture_source_where(std::size_t index, std::string_view name) {
  const std::string_view trimmed = trim_config_text(name);
  return trimmed.empty() ? "mixture source " + std::to_string(index) : "mixture source '" + std::string(trimmed) + "'";
}

std::string mixture_stage_where(std::size_t index) { return stage_where("mixture", index); }

void set_mixture_temperature(Config& config, std::string_view text) {
  config.mixture_temperature = parse_config_number("mixture_temperature", text);
}

void set_mixture_planned_steps(Config& config, std::string_view text) {
  config.mixture_planned_steps = parse_config_int("mixture_planned_steps", text);
}

void set_mixture_sources(Config& config, const std::vector<ConfigRecord>& records,
                         const std::filesystem::path& base_dir) {
  std::vector<MixtureSource> sources;
  for (std::size_t i = 0; i < records.size(); ++i) sources.push_back(read_source(records[i], i, base_dir));
  config.mixture = std::move(sources);
}

void set_mixture_stages(Config& config, const std::vector<ConfigRecord>& records) {
  const auto unknown = [](std::size_t, const std::string& where, const std::string& key, const std::string&) {
    config_error(where + ": unknown key '" + key + "' (a stage takes until_step and its weights by source)");
  };
  const std::vector<std::optional<std::int64_t>> ends = read_stage_ends("mixture", records, unknown);
  std::vector<MixtureStage> stages(records.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    stages[i].until_step = ends[i];
    for (const auto& [name, weight] : records[i].entries) {
      stages[i].weights.emplace_back(std::string(trim_config_text(name)), std::string(trim_config_text(weight)));
    }
  }
  config.stages = std::move(stages);
}

void validate_mixture(const Config& c) {
  if (c.mixture.empty()) {
    if (!c.stages.empty()) config_error("mixture stages are given without a mixture of sources");
    if (c.mixture_temperature || c.mixture_planned_steps) {
      config_error("mixture temperature or planned_steps is given without a mixture of sources");
    }
    return;
  }
  if (!c.dataset_dir.empty()) {
    config_error("config has both 'dataset_dir' and a <mixture>; a mixture names each source's dataset_dir instead");
  }
  if (!c.contract_fields) {
    config_error(
        "config key 'contract_fields' cannot be false with a mixture: its rows are joined through the "
        "contract fields (labels, token_weights, position_ids, cu_seqlens)");
  }
  validate_sources(c);
  validate_weights_from_sizes(c);
  validate_stages(c);
}

}  // namespace tokenfeed
