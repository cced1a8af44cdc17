// The parallel layout: which data-parallel rank a process is, from its global rank, the
// world size and the tensor/context/pipeline sizes (docs/distributed.md, "Tensor, context
// and pipeline parallelism").
//
// The global rank is laid out over the four dimensions in Config::parallel_order, the
// first fastest-varying: with tp-cp-dp-pp, rank = tp + TP·(cp + CP·(dp + DP·pp)). The
// ranks sharing a data-parallel rank form one data-parallel group: they get the same
// batches, and its lowest global rank is the group's leader (the one that decodes with
// data_loading=group_leader).
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenfeed/config.hpp"
#include "tokenfeed/loader.hpp"

namespace tokenfeed {

// The dimensions of parallel_order, in its order. Throws Error(config) naming the key
// unless `order` names each of tp, cp, dp, pp exactly once, joined by '-'.
std::array<std::string, 4> parse_parallel_order(std::string_view order);

// The checks validate_config makes of the layout's keys: the order, data_parallel_rank
// and data_parallel_size both or neither and the rank below the size, context_parallel_rank
// below context_parallel_size, each size at most 2^20. Throws Error(config).
void validate_parallel_layout_keys(const Config& config);

// The layout of a config whose rank and world_size are settled (numbers). Throws
// Error(config) naming the numbers when world_size is not a multiple of tp·cp·pp (and the
// data-parallel coordinates are not given), or when data_loading=group_leader cannot tell
// this process's leader.
ParallelLayout resolve_parallel_layout(const Config& config);

// The global ranks of every data-parallel group as the layout derives them, in increasing
// order (the first is the group's leader), indexed by data-parallel rank; empty when
// world_size is not a multiple of tp·cp·pp. REQUIRES: rank and world_size settled.
std::vector<std::vector<std::int64_t>> data_parallel_groups(const Config& config);

// The open line's ranks: "rank=5 of 8 (RANK/WORLD_SIZE) -> dp 1 of 2 (tp 2, cp 2, pp 1;
// tp-cp-dp-pp)", with " leader" or " follows rank 4" under data_loading=group_leader;
// "rank=2 of 4 (SOURCE)" alone for pure data parallelism given by rank and world_size.
std::string ranks_text(const ParallelLayout& layout, const std::string& rank_source, DataLoading loading);

}  // namespace tokenfeed
