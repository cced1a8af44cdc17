// The shape schedule's schema (a batch-size warmup), read in one place whichever door it
// comes through: the XML's <shape_schedule> with its <stage .../> elements (config.cpp turns
// them into records) and a Python mapping's `shape_schedule` list of dicts
// (python/src/mixture.cpp turns them into the same records). Stage ends are stage_list's.
//
// Messages name the stage, then the key: "shape_schedule stage 1: config key
// 'global_batch_size': ...".
//
// Thread-safety: free functions without shared state.
#pragma once

#include <string>
#include <vector>

#include "config/config_record.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

// Replaces config.shape_schedule by the stages `records` describe: until_step (stage_list's),
// until_tokens, global_batch_size and block_size, each an integer. Throws Error(config) for
// another key, a key given twice or a value that is no integer; the rest is
// validate_shape_schedule's.
void set_shape_schedule(Config& config, const std::vector<ConfigRecord>& records);

// Checks the stages against each other and the config: each but the last ends (by
// until_step or until_tokens, not both), the last does not, until_step increases and the
// values are positive. Where a stage's block size may differ from the key's is settled at
// open (splits/shape_plan.hpp). Throws Error(config) naming the stage.
void validate_shape_schedule(const Config& config);

// The schedule as one line of text (Loader::config's entry, the fingerprint's field):
// "until_step=100:global_batch_size=64 until_tokens=500000:global_batch_size=128 end".
std::string shape_schedule_text(const std::vector<ShapeStage>& stages);

}  // namespace tokenfeed
