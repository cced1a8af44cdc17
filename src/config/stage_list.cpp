#include "config/stage_list.hpp"

#include "config/config_values.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

std::string stage_where(std::string_view schedule, std::size_t index) {
  return std::string(schedule) + " stage " + std::to_string(index);
}

std::vector<std::optional<std::int64_t>> read_stage_ends(std::string_view schedule,
                                                         const std::vector<ConfigRecord>& records,
                                                         const StageKeyReader& other_key) {
  std::vector<std::optional<std::int64_t>> ends;
  for (std::size_t i = 0; i < records.size(); ++i) {
    const std::string where = stage_where(schedule, i);
    refuse_repeated_keys(where, records[i]);
    std::optional<std::int64_t> end;
    for (const auto& [key, text] : records[i].keys) {
      if (key != "until_step") {
        other_key(i, where, key, text);
        continue;
      }
      try {
        end = parse_config_int("until_step", text);
      } catch (const Error& e) {
        throw Error(ErrorKind::config, where + ": " + e.what());
      }
    }
    ends.push_back(end);
  }
  return ends;
}

void validate_stage_end(std::string_view schedule, std::size_t index, std::size_t count,
                        const std::optional<std::int64_t>& until_step,
                        const std::optional<std::int64_t>& previous_end) {
  const std::string where = stage_where(schedule, index);
  const bool last = index + 1 == count;
  if (!last && !until_step) {
    throw Error(ErrorKind::config, where + " has no until_step; only the last stage may omit it");
  }
  if (last && until_step) {
    throw Error(ErrorKind::config, where + " is the last stage and has until_step=" + std::to_string(*until_step) +
                                       "; the last stage holds for ever, remove until_step");
  }
  if (until_step && *until_step <= previous_end.value_or(0)) {
    throw Error(ErrorKind::config, where + ": until_step=" + std::to_string(*until_step) + " must be greater than " +
                                       std::to_string(previous_end.value_or(0)) + " (the stage's first step)");
  }
}

}  // namespace tokenfeed
