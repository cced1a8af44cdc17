// The train split's batch shape at each step: the config's shape_schedule (a batch-size
// warmup, a sequence-length curriculum) settled against the data-parallel size, with its
// until_tokens ends turned into steps and each stage's block size settled (its own or the
// key's). Val splits are never scheduled.
//
// Thread-safety: free functions without shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/shape_schedule.hpp"
#include "splits/fingerprint.hpp"
#include "tokenfeed/config.hpp"

namespace tokenfeed {

// The schedule of split `split` (null for val, and without a shape_schedule). Throws
// Error(config) naming the stage: a global_batch_size the data-parallel size does not
// divide, an until_tokens reached before its stage starts, an end not after the previous,
// a block size other than the key's outside token_stream's random windows or against the
// key's own rules (context parallelism's multiple).
// REQUIRES: `settled` passed validate_config and its data-parallel size is known.
std::shared_ptr<const ShapeSchedule> shape_schedule_of(const Config& settled, std::string_view split);

// `stages` (an RL GroupBatcher's schedule, which no config settles) as a ShapeSchedule over
// `data_parallel_size` ranks: a stage without global_batch_size has `global_batch`, one
// without block_size has `block_size`, any block size allowed; null for no stages. Throws
// Error(config) naming the stage, for what shape_schedule_of refuses and what
// validate_shape_schedule checks of a config's stages (values > 0, exactly the last stage
// without an end).
std::shared_ptr<const ShapeSchedule> settle_shape_stages(const std::vector<ShapeStage>& stages,
                                                         std::uint64_t global_batch, std::uint64_t block_size,
                                                         std::uint64_t data_parallel_size);

// The most rows a batch of `split` has on this rank (the batch buffers' size): batch_size,
// or the schedule's largest global batch / the data-parallel size.
std::size_t largest_batch_rows(const Config& settled, std::string_view split);

// The train split's schedule as the fingerprint's order field "shape_schedule" holds it,
// "FIRST:G FIRST:G ..." (each stage's first step and global batch; resume_state reads it
// back), or nullopt without a schedule (a config without one keeps its fingerprint).
std::optional<std::string> shape_schedule_field(const Config& settled);

// `settled` with val's own shape (val.batch_size, val.block_size) in place of the batch_size
// and block_size keys: the config val's split reads, a single dataset's or a mixture's.
Config with_val_shape(const Config& settled);

// Val's own shape as order fields, only when given (a config without it keeps its
// fingerprint): "val.global_batch_size" (val's rows x the data-parallel size, so that val's
// position resumes at another data-parallel size) and "val.block_size".
void add_val_shape_fields(const Config& settled, OrderFields& fields);

// The train split's step axis: its schedule, or batch_size x the data-parallel size at every
// step.
ShapeSchedule train_steps(const Config& settled);

// This rank's rows at global step `step` of `split`.
std::size_t batch_rows_at(const Config& settled, std::string_view split, std::uint64_t step);

// The longest rows a batch of `split` has (the batch buffers' cols before a context-parallel
// split), and the block size at global step `step`.
std::size_t largest_block_size(const Config& settled, std::string_view split);
std::size_t block_size_at(const Config& settled, std::string_view split, std::uint64_t step);

}  // namespace tokenfeed
