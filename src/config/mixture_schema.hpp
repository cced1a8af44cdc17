// The mixture's schema, read in one place whichever door it comes through: the XML's
// <mixture temperature="A" planned_steps="N"> with its <source .../> and <stage> elements
// (config.cpp turns them into records) and a Python mapping's `mixture`, `stages`,
// `mixture_temperature` and `mixture_planned_steps` (python/src/mixture.cpp turns its lists
// of dicts into the same records). The keys' parsing, their checks, defaults and error
// texts are these functions'; a door only turns its syntax into records.
//
// Messages name the record, then the key: "mixture source 'chat'" (by its index, "mixture
// source 1", while it has no name), "mixture stage 0"; the mixture's own values by the
// config keys that print them ('mixture_temperature', 'mixture_planned_steps').
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_record.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

// How messages name source `index` of a mixture: by `name` when it has one.
std::string mixture_source_where(std::size_t index, std::string_view name);
// How messages name stage `index` of a mixture's schedule ("mixture stage 0").
std::string mixture_stage_where(std::size_t index);

// The weights from dataset sizes' settings: <mixture temperature="A"> / mixture_temperature
// (a number) and <mixture planned_steps="N"> / mixture_planned_steps (an integer); their
// ranges are validate_mixture's. Throws Error(config) naming the key.
void set_mixture_temperature(Config& config, std::string_view text);
void set_mixture_planned_steps(Config& config, std::string_view text);

// Replaces config.mixture by the sources `records` describe: name and weight (required),
// max_epochs (a number), and the per-dataset keys as given, a relative dataset_dir resolved
// against `base_dir` (an XML file's directory; Python's working directory). Throws
// Error(config) for a record without a name or weight, a key given twice, a max_epochs
// that is no number; the rest is validate_mixture's.
void set_mixture_sources(Config& config, const std::vector<ConfigRecord>& records,
                         const std::filesystem::path& base_dir);

// Replaces config.stages by the stages `records` describe: until_step (stage_list's) and
// the weights by source (the records' entries). Throws Error(config) for any other key.
void set_mixture_stages(Config& config, const std::vector<ConfigRecord>& records);

// Checks a mixture's sources and stages against each other and the config: names, keys and
// their values, weights, weights from dataset sizes, stage ends. No mixture: no stages nor
// mixture settings either. Throws Error(config).
void validate_mixture(const Config& config);

}  // namespace tokenfeed
