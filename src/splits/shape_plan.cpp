#include "splits/shape_plan.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "splits/resolved_options.hpp"
#include "util/checked_math.hpp"

namespace tokenfeed {
namespace {

// How messages name stage `index` (config/stage_list's wording, which splits/ cannot include).
std::string stage_where(std::size_t index) { return "shape_schedule stage " + std::to_string(index); }

// Stage `index`'s first step after which `until_tokens` positions are trained, from the
// positions trained before it; Error(config) when they already are.
std::uint64_t end_by_tokens(std::size_t index, std::uint64_t first_step, std::uint64_t tokens_before,
                            std::uint64_t tokens_per_step, std::uint64_t until_tokens) {
  if (until_tokens <= tokens_before) {
    throw Error(ErrorKind::config, stage_where(index) + ": until_tokens=" + std::to_string(until_tokens) +
                                       " is reached before the stage starts (" + std::to_string(tokens_before) +
                                       " positions by step " + std::to_string(first_step) + ")");
  }
  const std::uint64_t left = until_tokens - tokens_before;
  return checked_sum(first_step, left / tokens_per_step + (left % tokens_per_step != 0 ? 1 : 0),
                     stage_where(index) + ": its end step");
}

// Stage `index`'s block size `block_size`, checked by the key's rules.
std::uint64_t checked_stage_block_size(const Config& settled, std::size_t index, std::int64_t block_size) {
  Config staged = settled;  // the key's rules, for the stage's value
  staged.block_size = block_size;
  try {
    check_context_parallel_rows(staged);
  } catch (const Error& e) {
    throw Error(ErrorKind::config, stage_where(index) + ": " + e.what());
  }
  return static_cast<std::uint64_t>(block_size);
}

// Stage `index`'s block size: its own, or the key's. A block size other than the key's must
// meet the key's own rules.
std::uint64_t stage_block_size(const Config& settled, std::size_t index, const ShapeStage& stage) {
  if (!stage.block_size || *stage.block_size == settled.block_size)
    return static_cast<std::uint64_t>(settled.block_size);
  // Every mode's rows take the step's length. token_stream: random windows at each stage's
  // length, epoch windows re-cut from units; sft_episode and sft_packed keep each episode's
  // window at its row's length; with truncation=split sft_episode cuts its documents in
  // epoch order at each row's length from the token reached (EpisodeSampler's cut epochs)
  // or draws (random mode) among the pieces at the step's length, and sft_packed cuts them
  // while packing (pack_pieces). A mixture's rows are its sources' rows at the step's
  // length (each source opened with every stage length).
  return checked_stage_block_size(settled, index, *stage.block_size);
}

// Stage `index`'s values on their own (validate_shape_schedule's rules, for stages that did
// not come through a config: an RL GroupBatcher's).
void check_stage_values(std::size_t index, std::size_t count, const ShapeStage& stage) {
  const std::string where = stage_where(index);
  const auto positive = [&where](const char* key, const std::optional<std::int64_t>& value) {
    if (value && *value <= 0) {
      throw Error(ErrorKind::config, where + ": " + key + " must be > 0, got " + std::to_string(*value));
    }
  };
  positive("until_step", stage.until_step);
  positive("until_tokens", stage.until_tokens);
  positive("global_batch_size", stage.global_batch_size);
  positive("block_size", stage.block_size);
  const bool ends = stage.until_step || stage.until_tokens;
  if (stage.until_step && stage.until_tokens) {
    throw Error(ErrorKind::config, where + " has both until_step and until_tokens; a stage ends by one of them");
  }
  if (ends == (index + 1 == count)) {
    throw Error(ErrorKind::config, where + (ends ? " is the last stage and has an end; the last stage holds for ever"
                                                 : " has no until_step or until_tokens; only the last stage has none"));
  }
}

// `stages` settled: each stage's global batch (`global` where it sets none; a multiple of
// `dp`) and block size (`block_of`), its until_tokens end turned into a step; `key_block`
// is the block size without the schedule.
std::shared_ptr<const ShapeSchedule> settle(
    const std::vector<ShapeStage>& stages, std::uint64_t global_default, std::uint64_t dp, std::uint64_t key_block,
    const std::function<std::uint64_t(std::size_t, const ShapeStage&)>& block_of) {
  std::vector<ShapeSchedule::Given> given;
  std::uint64_t first = 0, tokens = 0;
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const ShapeStage& stage = stages[i];
    check_stage_values(i, stages.size(), stage);
    const std::string where = stage_where(i);
    const std::uint64_t block = block_of(i, stage);
    const std::uint64_t global =
        stage.global_batch_size ? static_cast<std::uint64_t>(*stage.global_batch_size) : global_default;
    if (global % dp != 0) {
      throw Error(ErrorKind::config, where + ": global_batch_size=" + std::to_string(global) +
                                         " is not a multiple of the data-parallel size " + std::to_string(dp) +
                                         " (each rank takes global_batch_size / data-parallel size rows)");
    }
    // The same bound as batch_size x block_size's (validate_config): cu_seqlens are int32.
    const std::uint64_t rows = global / dp;
    if (rows > (std::uint64_t{1} << 24) || block > (std::uint64_t{1} << 26) ||
        rows * block >= (std::uint64_t{1} << 31)) {
      throw Error(ErrorKind::config, where + ": " + std::to_string(rows) + " rows per rank x block_size " +
                                         std::to_string(block) +
                                         " exceed the supported batch size of 2^31 - 1 positions");
    }
    const std::uint64_t per_step = checked_product(global, block, where + ": global_batch_size x block_size");
    std::optional<std::uint64_t> end;
    if (stage.until_tokens) {
      end = end_by_tokens(i, first, tokens, per_step, static_cast<std::uint64_t>(*stage.until_tokens));
    } else if (stage.until_step) {
      end = static_cast<std::uint64_t>(*stage.until_step);
      if (*end <= first) {
        throw Error(ErrorKind::config, where + ": until_step=" + std::to_string(*end) + " must be greater than " +
                                           std::to_string(first) + " (the stage's first step)");
      }
    }
    given.push_back(ShapeSchedule::Given{end, global, block});
    if (!end) break;
    tokens = checked_sum(tokens, checked_product(*end - first, per_step, where + ": its positions"),
                         "the positions before " + stage_where(i + 1));
    first = *end;
  }
  return std::make_shared<const ShapeSchedule>(given, key_block);
}

}  // namespace

std::shared_ptr<const ShapeSchedule> shape_schedule_of(const Config& settled, std::string_view split) {
  if (split != "train" || settled.shape_schedule.empty()) return nullptr;
  return settle(settled.shape_schedule, global_batch_size(settled), data_parallel_size(settled),
                static_cast<std::uint64_t>(settled.block_size), [&settled](std::size_t index, const ShapeStage& stage) {
                  return stage_block_size(settled, index, stage);
                });
}

std::shared_ptr<const ShapeSchedule> settle_shape_stages(const std::vector<ShapeStage>& stages,
                                                         std::uint64_t global_batch, std::uint64_t block_size,
                                                         std::uint64_t data_parallel_size) {
  if (stages.empty()) return nullptr;
  return settle(stages, global_batch, data_parallel_size, block_size,
                [block_size](std::size_t, const ShapeStage& stage) {
                  return stage.block_size ? static_cast<std::uint64_t>(*stage.block_size) : block_size;
                });
}

std::optional<std::string> shape_schedule_field(const Config& settled) {
  const auto schedule = shape_schedule_of(settled, "train");
  if (!schedule) return std::nullopt;
  // Each stage as FIRST_STEP:GLOBAL_BATCH, and :BLOCK_SIZE when some stage's block size is not
  // the key's.
  std::string stages;
  const bool blocks = schedule->changes_block_size();
  for (const ShapeSchedule::Stage& s : schedule->stages()) {
    stages += (stages.empty() ? "" : " ") + std::to_string(s.first_step) + ":" + std::to_string(s.global_batch);
    if (blocks) stages += ":" + std::to_string(s.block_size);
  }
  return stages;
}

ShapeSchedule train_steps(const Config& settled) {
  const auto schedule = shape_schedule_of(settled, "train");
  return schedule ? *schedule : ShapeSchedule::constant(global_batch_size(settled));
}

std::size_t largest_batch_rows(const Config& settled, std::string_view split) {
  const auto schedule = shape_schedule_of(settled, split);
  if (!schedule) return static_cast<std::size_t>(settled.batch_size);
  return static_cast<std::size_t>(schedule->largest_global_batch() / data_parallel_size(settled));
}

std::size_t batch_rows_at(const Config& settled, std::string_view split, std::uint64_t step) {
  const auto schedule = shape_schedule_of(settled, split);
  if (!schedule) return static_cast<std::size_t>(settled.batch_size);
  return static_cast<std::size_t>(schedule->global_batch_at(step) / data_parallel_size(settled));
}

std::size_t largest_block_size(const Config& settled, std::string_view split) {
  const auto schedule = shape_schedule_of(settled, split);
  if (!schedule) return static_cast<std::size_t>(settled.block_size);
  return static_cast<std::size_t>(schedule->largest_block_size());
}

std::size_t block_size_at(const Config& settled, std::string_view split, std::uint64_t step) {
  const auto schedule = shape_schedule_of(settled, split);
  if (!schedule) return static_cast<std::size_t>(settled.block_size);
  return static_cast<std::size_t>(schedule->block_size_at(step));
}

Config with_val_shape(const Config& settled) {
  Config c = settled;
  c.batch_size = settled.batch_size_for("val");
  c.block_size = settled.block_size_for("val");
  return c;
}

void add_val_shape_fields(const Config& settled, OrderFields& fields) {
  const Config::SplitOverrides& val = settled.val_overrides;
  if (val.batch_size) {
    fields["val.global_batch_size"] =
        std::to_string(static_cast<std::uint64_t>(*val.batch_size) * data_parallel_size(settled));
  }
  if (val.block_size) fields["val.block_size"] = std::to_string(*val.block_size);
}

}  // namespace tokenfeed
