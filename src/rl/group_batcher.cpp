// GroupBatcher (include/tokenfeed/rl.hpp): scored groups to packed batches.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/batch_pool.hpp"
#include "sampling/shape_schedule.hpp"
#include "splits/shape_plan.hpp"
#include "modes/episode_batch_source.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"
#include "tokenfeed/rl.hpp"
#include "util/shortest_text.hpp"

namespace tokenfeed {

const char* to_string(Advantage advantage) noexcept {
  switch (advantage) {
    case Advantage::grpo:
      return "grpo";
    case Advantage::mean_only:
      return "mean_only";
  }
  return "?";
}

Advantage parse_advantage(std::string_view text) {
  if (text == "grpo") return Advantage::grpo;
  if (text == "mean_only") return Advantage::mean_only;
  throw Error(ErrorKind::config, "advantage must be 'grpo' or 'mean_only', not '" + std::string(text) + "'");
}

namespace {

using detail::BatchSlot;

constexpr const char* kStateFormat = "tokenfeed-rl-state";

// A valid group ready to place: its sequences' kept lengths and advantages, and the
// metrics its pull (and the dropped pulls just before it) add to the batch that takes it.
struct PreparedGroup {
  ScoredGroup group;
  std::vector<std::size_t> kept;  // completion tokens kept, per completion, at block size `cut_for`
  std::size_t cut_for = 0;        // the block size `kept` was cut for (cut())
  std::vector<double> advantages;
  std::uint64_t next_index = 0;  // the pull index after this group
  RLMetrics metrics;
};

// True when float32, the batch's type for rewards and weights, holds `value` finite.
bool finite_in_float(double value) { return std::isfinite(value) && std::abs(value) <= FLT_MAX; }

std::string where(std::uint64_t index, const ScoredGroup& g) {
  std::string s = "group at pull index " + std::to_string(index);
  if (g.episode >= 0) s += " (prompt episode " + std::to_string(g.episode) + ")";
  return s;
}

}  // namespace

struct GroupBatcher::Impl {
  GroupBatcherOptions options;
  // options.shape_schedule settled (null: batch_size x block_size at every step).
  std::shared_ptr<const ShapeSchedule> schedule;
  std::shared_ptr<detail::BatchPool> pool;

  // The state: where a resumed run starts, and the metrics of the emitted batches.
  std::uint64_t committed_cursor = 0;
  RLMetrics totals;
  RLMetrics last;

  // Pulled but not yet in an emitted batch: the next pull index, and a valid group that
  // did not fit the last batch.
  std::uint64_t cursor = 0;
  std::optional<PreparedGroup> pending;

  explicit Impl(GroupBatcherOptions o)
      : options(std::move(o)),
        schedule(settle_shape_stages(options.shape_schedule, options.batch_size * options.data_parallel_size,
                                     options.block_size, options.data_parallel_size)) {
    detail::BatchShape shape;  // the largest stage's (a schedule's) rows and cols
    shape.rows = schedule ? schedule->largest_global_batch() / options.data_parallel_size : options.batch_size;
    shape.cols = schedule ? schedule->largest_block_size() : options.block_size;
    shape.y_is_labels = true;
    shape.contract_fields = true;
    shape.packed = true;
    shape.rl_fields = true;
    pool = std::make_shared<detail::BatchPool>(2, shape, "rl", kMaxHeldBatches);
  }

  // Refuses a token id outside [0, vocab_size) (>= 0 when the vocabulary is unknown).
  // One compare per token, on ids the batch copies anyway (its cost: perf/RESULTS_by_hand.md).
  void check_ids(const std::vector<std::int64_t>& ids, std::uint64_t index, const ScoredGroup& g,
                 const std::string& what) const {
    const std::uint64_t limit = options.vocab_size != 0 ? options.vocab_size : std::uint64_t{1} << 63;
    // A branch-free pass of subtractions and ORs in four lanes, which GCC vectorises for the
    // x86-64 baseline (it has no unsigned 64-bit compare): with highest = limit - 1 < 2^63, the top
    // bit of id | (highest - id) is set exactly when id is negative or above highest. Measured: 0.2 ns
    // per id. The position is found only for the message.
    const std::uint64_t highest = limit - 1;
    std::uint64_t lanes[4] = {0, 0, 0, 0};
    const std::size_t whole = ids.size() & ~std::size_t{3};
    for (std::size_t k = 0; k < whole; k += 4) {
      for (std::size_t j = 0; j < 4; ++j) {
        const auto u = static_cast<std::uint64_t>(ids[k + j]);
        lanes[j] |= u | (highest - u);
      }
    }
    for (std::size_t k = whole; k < ids.size(); ++k) {
      const auto u = static_cast<std::uint64_t>(ids[k]);
      lanes[0] |= u | (highest - u);
    }
    if (((lanes[0] | lanes[1] | lanes[2] | lanes[3]) >> 63) == 0) return;
    for (std::size_t k = 0; k < ids.size(); ++k) {
      if (static_cast<std::uint64_t>(ids[k]) >= limit) {  // a negative id wraps above any limit
        throw Error(ErrorKind::usage,
                    where(index, g) + ": " + what + " holds token id " + std::to_string(ids[k]) + " at position " +
                        std::to_string(k) +
                        (options.vocab_size != 0 ? ", outside the vocabulary [0, " + std::to_string(limit) + ")"
                                                 : ", negative"));
      }
    }
  }

  // Checks a pulled group and derives its advantages; nullopt when its rewards do not vary.
  std::optional<PreparedGroup> prepare(ScoredGroup&& g, std::uint64_t index) const {
    const std::size_t n = g.completions.size();
    if (options.group_size != 0 && n != options.group_size) {
      throw Error(ErrorKind::usage, where(index, g) + " has " + std::to_string(n) + " completions; group_size is " +
                                        std::to_string(options.group_size));
    }
    if (n < 2)
      throw Error(ErrorKind::usage,
                  where(index, g) + " has " + std::to_string(n) + " completions; a group needs at least 2");
    if (g.rewards.size() != n) {
      throw Error(ErrorKind::usage, where(index, g) + " has " + std::to_string(g.rewards.size()) + " rewards for " +
                                        std::to_string(n) + " completions");
    }
    if (!g.log_probs.empty() && g.log_probs.size() != n) {
      throw Error(ErrorKind::usage, where(index, g) + " has log_probs for " + std::to_string(g.log_probs.size()) +
                                        " completions out of " + std::to_string(n));
    }
    if (g.prompt.empty()) throw Error(ErrorKind::usage, where(index, g) + " has an empty prompt");
    check_prompt_fits(g, index);
    for (std::size_t i = 0; i < n; ++i) {
      if (g.completions[i].empty())
        throw Error(ErrorKind::usage, where(index, g) + ": completion " + std::to_string(i) + " is empty");
      if (!g.log_probs.empty() && g.log_probs[i].size() != g.completions[i].size()) {
        throw Error(ErrorKind::usage, where(index, g) + ": completion " + std::to_string(i) + " has " +
                                          std::to_string(g.completions[i].size()) + " tokens but " +
                                          std::to_string(g.log_probs[i].size()) + " log_probs");
      }
      if (!finite_in_float(g.rewards[i])) {
        throw Error(ErrorKind::usage, where(index, g) + ": reward " + std::to_string(i) + " (" +
                                          shortest_text(g.rewards[i]) +
                                          ") is not finite in float32, the batch's type for rewards");
      }
      check_ids(g.completions[i], index, g, "completion " + std::to_string(i));
    }
    check_ids(g.prompt, index, g, "the prompt");
    // Rewards are at most FLT_MAX in magnitude, so neither the sum nor the squares overflow.
    double mean = 0;
    for (double r : g.rewards) mean += r;
    mean /= static_cast<double>(n);
    double var = 0;
    for (double r : g.rewards) var += (r - mean) * (r - mean);
    const double sd = std::sqrt(var / static_cast<double>(n));
    if (sd <= options.eps) return std::nullopt;

    PreparedGroup p;
    p.next_index = index + 1;
    p.advantages.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      p.advantages[i] =
          options.advantage == Advantage::grpo ? (g.rewards[i] - mean) / (sd + options.eps) : g.rewards[i] - mean;
      if (!finite_in_float(p.advantages[i])) {
        throw Error(ErrorKind::usage, where(index, g) + ": the advantage of completion " + std::to_string(i) + " (" +
                                          shortest_text(p.advantages[i]) +
                                          ") is not finite in float32, the batch's type for token_weights; "
                                          "scale the rewards down");
      }
      p.metrics.reward_sum += g.rewards[i];
      p.metrics.advantage_sum += p.advantages[i];
      p.metrics.abs_advantage_sum += std::abs(p.advantages[i]);
    }
    p.metrics.valid_groups = 1;
    p.metrics.sequences = n;
    if (g.group_id < 0) g.group_id = static_cast<std::int64_t>(index);
    p.group = std::move(g);
    return p;
  }

  // The shortest block size of any step: a prompt must leave room for a completion in it.
  std::size_t shortest_block() const noexcept {
    return schedule ? static_cast<std::size_t>(schedule->shortest_block_size()) : options.block_size;
  }

  void check_prompt_fits(const ScoredGroup& g, std::uint64_t index) const {
    const std::size_t block = shortest_block();
    if (g.prompt.size() <= block) return;
    throw Error(ErrorKind::usage, where(index, g) + " has a prompt of " + std::to_string(g.prompt.size()) +
                                      " tokens: block_size " + std::to_string(block) +
                                      (schedule ? " (the shape_schedule's shortest)" : "") +
                                      " leaves no room for a completion");
  }

  // Cuts `p`'s completions for rows of `block` positions (a sequence of n tokens takes n - 1
  // input positions; at most block + 1 tokens), counting the truncated ones. Again when a
  // group left over from a batch opens one of another block size.
  static void cut(PreparedGroup& p, std::size_t block) {
    if (p.cut_for == block) return;
    const ScoredGroup& g = p.group;
    const std::size_t room = block + 1 - g.prompt.size();  // >= 1: check_prompt_fits
    p.kept.resize(g.completions.size());
    p.metrics.truncated_sequences = 0;
    for (std::size_t i = 0; i < g.completions.size(); ++i) {
      p.kept[i] = std::min(g.completions[i].size(), room);
      if (p.kept[i] < g.completions[i].size()) ++p.metrics.truncated_sequences;
    }
    p.cut_for = block;
  }

  // Pulls from `cursor` until a group's rewards vary.
  PreparedGroup pull_valid(const Pull& pull) {
    RLMetrics dropped;
    std::uint64_t run = 0;  // consecutive drops since the last failed run
    std::vector<std::string> tried;
    for (;;) {
      const std::uint64_t index = cursor++;
      ScoredGroup g = pull(index);
      ++dropped.attempts;
      const std::string name = where(index, g);
      std::optional<PreparedGroup> p = prepare(std::move(g), index);
      if (p) {
        p->metrics.attempts += dropped.attempts;
        p->metrics.zero_var_groups += dropped.zero_var_groups;
        p->metrics.failed_runs += dropped.failed_runs;
        return std::move(*p);
      }
      ++dropped.zero_var_groups;
      ++run;
      if (tried.size() < 16) tried.push_back(name);
      if (run >= options.max_attempts) {
        std::string list;
        for (const std::string& t : tried) list += (list.empty() ? "" : ", ") + t;
        if (run > tried.size()) list += " and " + std::to_string(run - tried.size()) + " more";
        const std::string what = "max_attempts (" + std::to_string(options.max_attempts) +
                                 ") consecutive groups were dropped because their rewards do not vary "
                                 "(std <= eps = " +
                                 shortest_text(options.eps) + "): " + list;
        if (!options.skip_failed_prompts) {
          throw Error(ErrorKind::pipeline,
                      what +
                          "; to pass over such runs, construct the batcher with skip_failed_prompts and load "
                          "its last state");
        }
        log_line(LogLevel::warning, "[tokenfeed] warning: " + what + "; skipped (skip_failed_prompts)");
        ++dropped.failed_runs;
        run = 0;
        tried.clear();
      }
    }
  }

  BatchSlot* acquire() {
    BatchSlot* slot = pool->acquire();
    if (slot == nullptr) {
      pool->grow_to(pool->size() + 1);
      slot = pool->acquire();
    }
    if (slot == nullptr) {
      throw Error(ErrorKind::usage, "GroupBatcher: " + std::to_string(kMaxHeldBatches) +
                                        " batches are held; release one before asking for the next");
    }
    return slot;
  }

  // Where each sequence of a group goes (first fit over the rows, in order), given the
  // positions used per row; false when one does not fit.
  // REQUIRES: `p` cut for `block`, the batch's block size.
  static bool fit(const PreparedGroup& p, std::size_t block, std::vector<std::size_t>& used,
                  std::vector<std::size_t>& rows) {
    rows.assign(p.kept.size(), 0);
    for (std::size_t i = 0; i < p.kept.size(); ++i) {
      const std::size_t positions = p.group.prompt.size() + p.kept[i] - 1;
      std::size_t r = 0;
      while (r < used.size() && used[r] + positions > block) ++r;
      if (r == used.size()) return false;
      rows[i] = r;
      used[r] += positions;
    }
    return true;
  }

  // Writes completion `i` of `p` at (row, column) of a batch of `cols` positions per row;
  // returns its input positions.
  std::size_t write(BatchSlot& slot, const PreparedGroup& p, std::size_t i, std::size_t row, std::size_t column,
                    std::size_t cols) const {
    const ScoredGroup& g = p.group;
    const std::size_t P = g.prompt.size();
    const std::size_t positions = P + p.kept[i] - 1;
    const std::size_t at = row * cols + column;
    const auto token = [&](std::size_t k) { return k < P ? g.prompt[k] : g.completions[i][k - P]; };
    const float advantage = static_cast<float>(p.advantages[i]);
    const bool lp = !g.log_probs.empty();
    for (std::size_t k = 0; k < positions; ++k) {
      const bool completion_label = k + 1 >= P;  // the label s[k+1] is a completion token
      slot.x[at + k] = token(k);
      slot.labels[at + k] = completion_label ? token(k + 1) : options.ignore_index;
      slot.token_weights[at + k] = completion_label ? advantage : 0.0f;
      slot.log_probs[at + k] = completion_label && lp ? g.log_probs[i][k + 1 - P] : 0.0f;
      slot.position_ids[at + k] = static_cast<std::int32_t>(k);
    }
    return positions;
  }

  struct Placed {
    std::size_t group;  // index into the batch's groups
    std::size_t completion;
    std::size_t column;
    std::size_t positions;
  };

  Batch next_batch(const Pull& pull) {
    BatchSlot* slot = acquire();
    try {
      Batch batch = fill(*slot, pull);
      return batch;
    } catch (...) {
      pool->release(slot);
      cursor = committed_cursor;
      pending.reset();
      throw;
    }
  }

  Batch fill(BatchSlot& slot, const Pull& pull) {
    const std::uint64_t step = totals.batches;
    // The step's shape: its shape_schedule stage's, or the options' at every step.
    const std::size_t rows =
        schedule ? static_cast<std::size_t>(schedule->global_batch_at(step) / options.data_parallel_size)
                 : options.batch_size;
    const std::size_t T = schedule ? static_cast<std::size_t>(schedule->block_size_at(step)) : options.block_size;
    slot.begin_batch(step, 0, step, 0, rows, T);
    slot.log_probs_given = false;
    // This batch's cells only: the pages beyond them stay with the kernel (begin_batch gave
    // them back for a smaller stage).
    std::fill_n(slot.log_probs.begin(), std::min(slot.log_probs.size(), rows * T), 0.0f);
    std::vector<std::size_t> used(rows, 0), trial, where_rows;
    std::vector<std::vector<Placed>> placed(rows);
    std::vector<PreparedGroup> groups;  // the groups of this batch, in placement order
    RLMetrics metrics;
    metrics.batches = 1;
    std::uint64_t next_committed = committed_cursor;
    for (;;) {
      if (!pending) pending = pull_valid(pull);
      cut(*pending, T);
      trial = used;
      if (!fit(*pending, T, trial, where_rows)) {
        if (groups.empty()) {
          std::size_t positions = 0;
          for (std::size_t k : pending->kept) positions += pending->group.prompt.size() + k - 1;
          throw Error(ErrorKind::usage, where(pending->next_index - 1, pending->group) + " needs " +
                                            std::to_string(positions) + " positions in " +
                                            std::to_string(pending->kept.size()) +
                                            " sequences and does not fit an empty batch of " + std::to_string(rows) +
                                            " rows x " + std::to_string(T) + "; raise batch_size or block_size");
        }
        break;  // the group opens the next batch
      }
      groups.push_back(std::move(*pending));
      pending.reset();
      const PreparedGroup& g = groups.back();
      metrics += g.metrics;
      if (!g.group.log_probs.empty()) slot.log_probs_given = true;
      for (std::size_t i = 0; i < g.kept.size(); ++i) {
        const std::size_t r = where_rows[i];
        const std::size_t positions = write(slot, g, i, r, used[r], T);
        placed[r].push_back({groups.size() - 1, i, used[r], positions});
        used[r] += positions;
      }
      next_committed = g.next_index;
    }
    // The sequence lists, in position order.
    for (std::size_t r = 0; r < rows; ++r) {
      slot.episode_ids[r] = placed[r].empty() ? -1 : groups[placed[r].front().group].group.episode;
      if (!placed[r].empty()) ++slot.real_rows;
      for (const Placed& q : placed[r]) {
        const std::size_t k = slot.num_sequences;
        const ScoredGroup& g = groups[q.group].group;
        slot.rewards[k] = static_cast<float>(g.rewards[q.completion]);
        slot.group_ids[k] = g.group_id;
        slot.add_sequence(q.positions);
        slot.segments[slot.segment_count++] = {static_cast<std::uint32_t>(r), static_cast<std::uint32_t>(q.column),
                                               static_cast<std::uint32_t>(q.positions), g.episode};
      }
      slot.real_positions += used[r];
      const std::size_t k = slot.num_sequences;
      finish_row_padding(slot, r, T, used[r], options.pad_token_id, options.ignore_index);
      if (slot.num_sequences > k) {
        slot.rewards[k] = 0.0f;
        slot.group_ids[k] = -1;
      }
    }
    committed_cursor = next_committed;
    totals += metrics;
    last = metrics;
    return pool->make_batch(&slot);
  }
};

GroupBatcher::GroupBatcher(GroupBatcherOptions options) {
  if (options.batch_size == 0 || options.block_size == 0) {
    throw Error(ErrorKind::config, "GroupBatcher: batch_size and block_size must be > 0, got " +
                                       std::to_string(options.batch_size) + " and " +
                                       std::to_string(options.block_size));
  }
  if (options.group_size == 1) {
    throw Error(ErrorKind::config,
                "GroupBatcher: group_size must be >= 2 (a group of one has no reward variance), got 1");
  }
  if (!(options.eps >= 0) || !std::isfinite(options.eps)) {
    throw Error(ErrorKind::config, "GroupBatcher: eps must be finite and >= 0, got " + shortest_text(options.eps));
  }
  if (options.max_attempts == 0) throw Error(ErrorKind::config, "GroupBatcher: max_attempts must be > 0");
  if (options.data_parallel_size == 0) throw Error(ErrorKind::config, "GroupBatcher: data_parallel_size must be > 0");
  try {
    impl_ = std::make_unique<Impl>(std::move(options));
  } catch (const Error& e) {
    throw Error(e.kind(), std::string("GroupBatcher: ") + e.what());
  }
}

GroupBatcher::~GroupBatcher() = default;

Batch GroupBatcher::next_batch(const Pull& pull) { return impl_->next_batch(pull); }
const RLMetrics& GroupBatcher::batch_metrics() const noexcept { return impl_->last; }
const RLMetrics& GroupBatcher::total_metrics() const noexcept { return impl_->totals; }
std::uint64_t GroupBatcher::cursor() const noexcept { return impl_->committed_cursor; }
const GroupBatcherOptions& GroupBatcher::options() const noexcept { return impl_->options; }

std::string GroupBatcher::save_state() const {
  const RLMetrics& m = impl_->totals;
  nlohmann::json j;
  j["format"] = kStateFormat;
  j["version"] = 1;
  j["cursor"] = impl_->committed_cursor;
  j["metrics"] = {{"batches", m.batches},
                  {"attempts", m.attempts},
                  {"zero_var_groups", m.zero_var_groups},
                  {"valid_groups", m.valid_groups},
                  {"sequences", m.sequences},
                  {"truncated_sequences", m.truncated_sequences},
                  {"failed_runs", m.failed_runs},
                  {"reward_sum", m.reward_sum},
                  {"advantage_sum", m.advantage_sum},
                  {"abs_advantage_sum", m.abs_advantage_sum}};
  return j.dump();
}

void GroupBatcher::load_state(std::string_view state) {
  nlohmann::json j = nlohmann::json::parse(state, nullptr, false);
  const auto bad = [](const std::string& what) { return Error(ErrorKind::state, "RL state: " + what); };
  if (j.is_discarded() || !j.is_object()) throw bad("not a JSON object");
  if (!j.contains("format") || j["format"] != kStateFormat)
    throw bad("field 'format' is not '" + std::string(kStateFormat) + "'");
  if (!j.contains("version") || j["version"] != 1) throw bad("field 'version' is not 1");
  const auto count = [&](const nlohmann::json& obj, const char* key) {
    if (!obj.contains(key) || !obj[key].is_number_unsigned())
      throw bad(std::string("field '") + key + "' is not a non-negative integer");
    return obj[key].get<std::uint64_t>();
  };
  const auto real = [&](const nlohmann::json& obj, const char* key) {
    if (!obj.contains(key) || !obj[key].is_number())
      throw bad(std::string("field 'metrics.") + key + "' is not a number");
    return obj[key].get<double>();
  };
  const std::uint64_t cursor = count(j, "cursor");
  if (!j.contains("metrics") || !j["metrics"].is_object()) throw bad("field 'metrics' is not an object");
  const nlohmann::json& mj = j["metrics"];
  RLMetrics m;
  m.batches = count(mj, "batches");
  m.attempts = count(mj, "attempts");
  m.zero_var_groups = count(mj, "zero_var_groups");
  m.valid_groups = count(mj, "valid_groups");
  m.sequences = count(mj, "sequences");
  m.truncated_sequences = count(mj, "truncated_sequences");
  m.failed_runs = mj.contains("failed_runs") ? count(mj, "failed_runs") : 0;  // absent before failed_runs existed
  m.reward_sum = real(mj, "reward_sum");
  m.advantage_sum = real(mj, "advantage_sum");
  m.abs_advantage_sum = real(mj, "abs_advantage_sum");
  impl_->committed_cursor = impl_->cursor = cursor;
  impl_->totals = m;
  impl_->last = RLMetrics{};
  impl_->pending.reset();
}

}  // namespace tokenfeed
