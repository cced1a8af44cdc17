// A schedule's stages, read and checked the same way whichever schedule holds them (a
// mixture's weights, <mixture><stage until_step="N">; a shape schedule's to come): each
// stage ends before its until_step, every stage but the last has one, the last has none,
// and the ends increase. The schedule's own keys are its reader's.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config_record.hpp"

namespace tokenfeed {

// How messages name a stage, whichever door it came through: "SCHEDULE stage INDEX"
// ("mixture stage 0").
std::string stage_where(std::string_view schedule, std::size_t index);

// Takes a stage's key other than until_step: (stage index, the stage's name in messages,
// key, text). Throws Error(config) for a key the schedule does not take.
using StageKeyReader =
    std::function<void(std::size_t index, const std::string& where, const std::string& key, const std::string& text)>;

// Each record's until_step (absent when not given), read by the config parser's integer
// check ("mixture stage 1: config key 'until_step': expected an integer, got 'soon'"); its
// other keys go to `other_key`. Throws Error(config) for a key given twice in a record.
std::vector<std::optional<std::int64_t>> read_stage_ends(std::string_view schedule,
                                                         const std::vector<ConfigRecord>& records,
                                                         const StageKeyReader& other_key);

// Checks stage `index` of `count`: only the last may omit until_step and the last must, and
// its end is greater than the previous stage's (`previous_end`, absent: step 0).
void validate_stage_end(std::string_view schedule, std::size_t index, std::size_t count,
                        const std::optional<std::int64_t>& until_step, const std::optional<std::int64_t>& previous_end);

}  // namespace tokenfeed
