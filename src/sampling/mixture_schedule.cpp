#include "sampling/mixture_schedule.hpp"

#include <algorithm>
#include <numeric>

#include "tokenfeed/error.hpp"
#include "util/checked_math.hpp"

namespace tokenfeed {

std::optional<ExactWeight> parse_mixture_weight(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\n')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\n')) text.remove_suffix(1);
  ExactWeight w;
  int whole_digits = 0;
  bool point = false;
  for (const char c : text) {
    if (c == '.' && !point) {
      point = true;
      continue;
    }
    if (c < '0' || c > '9') return std::nullopt;
    if (point) {
      if (++w.decimals > 6) return std::nullopt;
    } else if (++whole_digits > 9) {
      return std::nullopt;
    }
    w.mantissa = w.mantissa * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (whole_digits + w.decimals == 0) return std::nullopt;
  return w;
}

namespace {

// A stage's weights (`texts`, one per source of `names`) as integers in lowest terms:
// exact decimals scaled by 10^(most decimals), then reduced by their gcd. Throws
// Error(config) naming `where` for a malformed weight, all zeros, or a sum (the period)
// above MixtureSchedule::kMaxPeriod.
std::vector<std::uint64_t> lowest_integer_weights(const std::vector<std::string>& texts,
                                                  const std::vector<std::string>& names, const std::string& where) {
  const std::size_t n = names.size();
  std::vector<ExactWeight> exact(n);
  int decimals = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto w = parse_mixture_weight(texts[i]);
    if (!w) {
      throw Error(ErrorKind::config, where + ": weight '" + texts[i] + "' of source '" + names[i] +
                                         "' is not a non-negative integer or decimal (at most 9 digits before "
                                         "the point and 6 after)");
    }
    exact[i] = *w;
    decimals = std::max(decimals, w->decimals);
  }
  std::vector<std::uint64_t> weights(n);
  std::uint64_t divisor = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t w = exact[i].mantissa;
    for (int d = exact[i].decimals; d < decimals; ++d) w *= 10;
    weights[i] = w;
    divisor = std::gcd(divisor, w);
  }
  if (divisor == 0) {
    throw Error(ErrorKind::config, where + ": every source's weight is zero; at least one must be positive");
  }
  std::uint64_t total = 0;
  for (std::uint64_t& w : weights) {
    w /= divisor;
    total += w;
    if (total > MixtureSchedule::kMaxPeriod) {
      throw Error(ErrorKind::config, where + ": the weights in lowest integer terms sum to more than " +
                                         std::to_string(MixtureSchedule::kMaxPeriod) +
                                         " (the round-robin's period); use weights with fewer decimals");
    }
  }
  return weights;
}

// The first `picks` (at most one period, `total`) picks of the smooth weighted round-robin
// over `weights`: the source of each pick (`sequence`), and per source its picks' places
// (`positions`).
void round_robin_period(const std::vector<std::uint64_t>& weights, std::uint64_t total, std::uint64_t picks,
                        std::vector<std::uint32_t>& sequence, std::vector<std::vector<std::uint32_t>>& positions) {
  const std::size_t n = weights.size();
  sequence.resize(picks);
  positions.resize(n);
  for (std::size_t i = 0; i < n; ++i) positions[i].reserve(std::min(weights[i], picks));
  std::vector<std::int64_t> current(n, 0);
  const auto period = static_cast<std::int64_t>(total);
  for (std::uint64_t p = 0; p < picks; ++p) {
    std::size_t best = 0;
    for (std::size_t i = 0; i < n; ++i) {
      current[i] += static_cast<std::int64_t>(weights[i]);
      if (current[i] > current[best]) best = i;
    }
    current[best] -= period;
    sequence[p] = static_cast<std::uint32_t>(best);
    positions[best].push_back(static_cast<std::uint32_t>(p));
  }
}

// Only the last stage may omit until_step, and a stage ends after it starts. Throws
// Error(config) naming the stage (`where`) otherwise.
void check_stage_end(const MixtureSchedule::StageSpec& spec, const std::string& where, std::uint64_t first_step,
                     bool last) {
  if (!last) {
    if (!spec.until) throw Error(ErrorKind::config, where + " has no until_step; only the last stage may omit it");
    if (*spec.until <= first_step) {
      throw Error(ErrorKind::config, where + ": until_step=" + std::to_string(*spec.until) +
                                         " must be greater than the stage's first step " + std::to_string(first_step));
    }
  } else if (spec.until) {
    throw Error(ErrorKind::config, where + " is the last stage and has until_step=" + std::to_string(*spec.until) +
                                       "; the last stage holds for ever, remove until_step");
  }
}

// Whether two step axes give every step the same rows.
bool same_steps(const ShapeSchedule& a, const ShapeSchedule& b) {
  const auto& x = a.stages();
  const auto& y = b.stages();
  return std::equal(x.begin(), x.end(), y.begin(), y.end(), [](const auto& p, const auto& q) {
    return p.first_step == q.first_step && p.end_step == q.end_step && p.global_batch == q.global_batch;
  });
}

// The global rows before `step` on the step axis `steps`: the first row of the stage
// `where` starting there. Throws Error(config) naming the stage when they overflow 64 bits
// (a huge until_step would otherwise start the stage at a wrapped row).
std::uint64_t first_row_of(const ShapeSchedule& steps, std::uint64_t step, const std::string& where) {
  const ShapeSchedule::Stage& at = steps.stage_at(step);
  const std::string what =
      where + "'s first step (the until_step before it) x " +
      (steps.stages().size() == 1 ? std::string("batch_size x world_size")
                                  : "the global_batch_size of shape_schedule stage " +
                                        std::to_string(&at - steps.stages().data()) + ", after its first step");
  return checked_sum(at.rows_before, checked_product(step - at.first_step, at.global_batch, what),
                     where + "'s first row");
}

// The global rows of steps [from, to) on the step axis `steps`, or `cap` when they are
// more (never overflowing: a stage stores at most one period of picks).
std::uint64_t rows_between(const ShapeSchedule& steps, std::uint64_t from, std::uint64_t to, std::uint64_t cap) {
  std::uint64_t rows = 0;
  for (const ShapeSchedule::Stage& stage : steps.stages()) {
    const std::uint64_t begin = std::max(from, stage.first_step);
    const std::uint64_t end = stage.end_step ? std::min(to, *stage.end_step) : to;
    if (begin >= end) continue;
    if (end - begin > (cap - rows) / stage.global_batch) return cap;
    rows += (end - begin) * stage.global_batch;
  }
  return std::min(rows, cap);
}

}  // namespace

MixtureSchedule::MixtureSchedule(std::vector<std::string> names, std::vector<StageSpec> specs, ShapeSchedule steps,
                                 const std::vector<std::string>& stage_names, const MixtureSchedule* reuse)
    : names_(std::move(names)), steps_(std::move(steps)) {
  const std::size_t n = names_.size();
  std::uint64_t first_step = 0;
  // Every stage so far is reuse's (which must read the same step axis).
  bool sharing = reuse != nullptr && same_steps(reuse->steps_, steps_);
  for (std::size_t s = 0; s < specs.size(); ++s) {
    const StageSpec& spec = specs[s];
    const std::string where = s < stage_names.size() ? stage_names[s] : "mixture stage " + std::to_string(s);
    check_stage_end(spec, where, first_step, s + 1 == specs.size());
    sharing = sharing && s < reuse->stages_.size() && reuse->stages_[s]->first_step == first_step &&
              reuse->stages_[s]->until == spec.until && reuse->stages_[s]->texts == spec.weights;
    if (sharing) {  // the same stage after the same stages: the same rows
      stages_.push_back(reuse->stages_[s]);
      if (spec.until) first_step = *spec.until;
      continue;
    }
    Stage stage;
    stage.first_step = first_step;
    stage.until = spec.until;
    stage.first_row = first_row_of(steps_, first_step, where);
    stage.texts = spec.weights;
    stage.weights = lowest_integer_weights(spec.weights, names_, where);
    for (const std::uint64_t w : stage.weights) stage.total += w;  // <= kMaxPeriod: no wrap
    // One period of the smooth weighted round-robin, or the stage's rows when it ends
    // before a period does (a short stage, as weight changes make, stores only its rows).
    const std::uint64_t picks = spec.until ? rows_between(steps_, first_step, *spec.until, stage.total) : stage.total;
    round_robin_period(stage.weights, stage.total, picks, stage.sequence, stage.positions);
    stage.base.assign(n, 0);
    if (s > 0) {
      const Stage& prev = *stages_.back();
      const std::uint64_t rows = stage.first_row - prev.first_row;
      for (std::size_t i = 0; i < n; ++i) {
        stage.base[i] = prev.base[i] + rows_in_stage(prev, static_cast<std::uint32_t>(i), rows);
      }
    }
    if (spec.until) first_step = *spec.until;
    stages_.push_back(std::make_shared<const Stage>(std::move(stage)));
  }
  if (stages_.empty()) throw Error(ErrorKind::config, "a mixture needs at least one stage of weights");
}

std::uint64_t MixtureSchedule::rows_in_stage(const Stage& stage, std::uint32_t source,
                                             std::uint64_t local_row) const noexcept {
  const std::vector<std::uint32_t>& at = stage.positions[source];
  const std::uint64_t place = local_row % stage.total;
  const auto before = static_cast<std::uint64_t>(std::lower_bound(at.begin(), at.end(), place) - at.begin());
  return (local_row / stage.total) * stage.weights[source] + before;
}

std::size_t MixtureSchedule::stage_of_row(std::uint64_t global_row) const noexcept {
  // Stages start at increasing rows; a weight change every few steps makes many.
  const auto after = std::upper_bound(stages_.begin() + 1, stages_.end(), global_row,
                                      [](std::uint64_t row, const auto& stage) { return row < stage->first_row; });
  return static_cast<std::size_t>(after - stages_.begin()) - 1;
}

std::size_t MixtureSchedule::stage_of_step(std::uint64_t step) const noexcept {
  const auto after = std::upper_bound(stages_.begin() + 1, stages_.end(), step,
                                      [](std::uint64_t at, const auto& stage) { return at < stage->first_step; });
  return static_cast<std::size_t>(after - stages_.begin()) - 1;
}

MixtureSchedule::Pick MixtureSchedule::pick(std::uint64_t global_row) const noexcept {
  const Stage& stage = *stages_[stage_of_row(global_row)];
  const std::uint64_t local = global_row - stage.first_row;
  Pick pick;
  pick.source = stage.sequence[local % stage.total];
  pick.index = stage.base[pick.source] + rows_in_stage(stage, pick.source, local);
  return pick;
}

std::uint64_t MixtureSchedule::rows_before(std::uint32_t source, std::uint64_t global_row) const noexcept {
  const Stage& stage = *stages_[stage_of_row(global_row)];
  return stage.base[source] + rows_in_stage(stage, source, global_row - stage.first_row);
}

}  // namespace tokenfeed
