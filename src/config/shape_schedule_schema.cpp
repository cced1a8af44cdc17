#include "config/shape_schedule_schema.hpp"

#include <optional>

#include "config/config_values.hpp"
#include "config/stage_list.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

constexpr const char* kSchedule = "shape_schedule";

// The stage's value of `key` parsed as the config parser parses integers, its message
// prefixed with the stage.
std::int64_t stage_int(const std::string& where, const std::string& key, const std::string& text) {
  try {
    return parse_config_int(key, text);
  } catch (const Error& e) {
    throw Error(ErrorKind::config, where + ": " + e.what());
  }
}

void require_positive_value(const std::string& where, const char* key, const std::optional<std::int64_t>& value) {
  if (value && *value < 1) {
    throw Error(ErrorKind::config, where + ": config key '" + key + "' must be > 0, got " + std::to_string(*value));
  }
}

}  // namespace

void set_shape_schedule(Config& config, const std::vector<ConfigRecord>& records) {
  std::vector<ShapeStage> stages(records.size());
  const auto other_key = [&stages](std::size_t i, const std::string& where, const std::string& key,
                                   const std::string& text) {
    if (key == "until_tokens") {
      stages[i].until_tokens = stage_int(where, key, text);
    } else if (key == "global_batch_size") {
      stages[i].global_batch_size = stage_int(where, key, text);
    } else if (key == "block_size") {
      stages[i].block_size = stage_int(where, key, text);
    } else {
      throw Error(ErrorKind::config, where + ": unknown key '" + key +
                                         "' (a stage takes until_step or until_tokens, global_batch_size, block_size)");
    }
  };
  const std::vector<std::optional<std::int64_t>> ends = read_stage_ends(kSchedule, records, other_key);
  for (std::size_t i = 0; i < records.size(); ++i) stages[i].until_step = ends[i];
  config.shape_schedule = std::move(stages);
}

void validate_shape_schedule(const Config& config) {
  const std::vector<ShapeStage>& stages = config.shape_schedule;
  if (stages.empty()) return;
  std::optional<std::int64_t> previous_end;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const ShapeStage& s = stages[i];
    const std::string where = stage_where(kSchedule, i);
    if (s.until_step && s.until_tokens) {
      throw Error(ErrorKind::config, where + " has both until_step and until_tokens; a stage ends by one of them");
    }
    require_positive_value(where, "until_tokens", s.until_tokens);
    require_positive_value(where, "global_batch_size", s.global_batch_size);
    require_positive_value(where, "block_size", s.block_size);
    // A stage ending by tokens has its step fixed when the shapes are known (at open);
    // until_step ends are checked here.
    if (s.until_tokens) {
      if (i + 1 == stages.size()) {
        throw Error(ErrorKind::config,
                    where + " is the last stage and has until_tokens=" + std::to_string(*s.until_tokens) +
                        "; the last stage holds for ever, remove until_tokens");
      }
      continue;
    }
    validate_stage_end(kSchedule, i, stages.size(), s.until_step, previous_end);
    if (s.until_step) previous_end = s.until_step;
  }
}

std::string shape_schedule_text(const std::vector<ShapeStage>& stages) {
  std::string text;
  for (const ShapeStage& s : stages) {
    std::string stage;
    const auto add = [&stage](const char* key, const std::optional<std::int64_t>& value) {
      if (value) stage += (stage.empty() ? "" : ":") + std::string(key) + "=" + std::to_string(*value);
    };
    add("until_step", s.until_step);
    add("until_tokens", s.until_tokens);
    add("global_batch_size", s.global_batch_size);
    add("block_size", s.block_size);
    if (!s.until_step && !s.until_tokens) stage = stage.empty() ? "end" : "end:" + stage;
    text += (text.empty() ? "" : " ") + stage;
  }
  return text;
}

}  // namespace tokenfeed
