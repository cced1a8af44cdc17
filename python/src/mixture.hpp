// A mixture given from Python: the config mapping's `mixture` (a list of source dicts) and
// `stages` (a list of stage dicts) turned into the records the XML's <mixture> becomes, and
// read by the same schema (src/config/mixture_schema: its parsing, checks and messages).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>

#include <nanobind/nanobind.h>

#include "tokenfeed/config.hpp"

namespace tokenfeed::python {

// How a config value becomes its XML text (config.cpp's rule for every key).
using ValueText = std::function<std::string(std::string_view key, nanobind::handle value)>;

// True when `key` is "mixture", "stages", "mixture_temperature", "mixture_planned_steps" or
// "shape_schedule" (then applied to `config`), false otherwise.
//   mixture: [{"name": "chat", "dataset_dir": "data/chat", "weight": 3, "epoch_seed": 7, ...}, ...]
//            every key but name, weight and max_epochs is a per-dataset key
//            (Config::MixtureSource::keys); a relative dataset_dir resolves against the
//            working directory. A weight may be "auto" (weights from dataset sizes).
//   mixture_temperature: 0.3, mixture_planned_steps: 100000 (<mixture temperature planned_steps>)
//   stages:  [{"until_step": 2000}, {"weights": {"chat": 1, "web": 1}}]
//   shape_schedule: [{"until_step": 100, "global_batch_size": 64}, {"global_batch_size": 128}]
//            (src/config/shape_schedule_schema's records, as the XML's <shape_schedule>)
// A value is taken as a config key's (str, int, bool, path) or a float (its shortest decimal
// text, repr); None is absent. Throws Error(config) naming the record ("mixture source
// 'chat'", "mixture stage 1") and the key, as the XML's reading does.
bool apply_mixture_key(Config& config, std::string_view key, nanobind::handle value, const ValueText& value_text);

// Loader.set_mixture_weights's mapping (source name -> weight, by the same rule as a
// config weight) as the texts Loader::set_mixture_weights parses. Throws Error(config)
// naming the source for a value that is no number or string, or a key that is no str.
std::map<std::string, std::string> mixture_weight_texts(nanobind::handle weights);

}  // namespace tokenfeed::python
