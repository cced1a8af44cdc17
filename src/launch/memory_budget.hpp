// The memory the loader's batch buffers may take: each split's pool depths (prefetch_depth,
// or auto under prefetch_memory_mb), and the check, before any buffer is allocated, that
// every split's pool at its largest fits max_memory_mb: a small config must not be able to
// ask for more memory than the machine has.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "pipeline/batch_pool.hpp"
#include "pipeline/split_pipeline.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

// The pool depths of a split whose slots have `shape`: prefetch_depth, or with 0 (auto) a
// start and a cap under prefetch_memory_mb.
SplitPipeline::Depths pool_depths(const Config& config, const detail::BatchShape& shape);

// Throws Error(config), naming each split's share, when the pools of `splits` (name,
// shape), each at its cap plus max_held_batches, exceed effective_max_memory_mb(config).
void check_memory_bound(const Config& config, const std::vector<std::pair<std::string, detail::BatchShape>>& splits);

}  // namespace tokenfeed
