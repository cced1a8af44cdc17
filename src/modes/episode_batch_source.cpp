#include "modes/episode_batch_source.hpp"

#include <algorithm>
#include <numeric>

namespace tokenfeed {

void finish_row_padding(detail::BatchSlot& slot, std::size_t row, std::size_t cols, std::size_t real,
                        std::int64_t pad_token_id, std::int64_t ignore_index) noexcept {
  const std::size_t begin = row * cols;
  std::fill(slot.x.begin() + static_cast<std::ptrdiff_t>(begin + real), slot.x.begin() + static_cast<std::ptrdiff_t>(begin + cols), pad_token_id);
  std::fill(slot.labels.begin() + static_cast<std::ptrdiff_t>(begin + real), slot.labels.begin() + static_cast<std::ptrdiff_t>(begin + cols), ignore_index);
  std::fill(slot.token_weights.begin() + static_cast<std::ptrdiff_t>(begin + real), slot.token_weights.begin() + static_cast<std::ptrdiff_t>(begin + cols), 0.0f);
  std::iota(slot.position_ids.begin() + static_cast<std::ptrdiff_t>(begin + real), slot.position_ids.begin() + static_cast<std::ptrdiff_t>(begin + cols), 0);
  if (real < cols) slot.add_sequence(cols - real);
}

void EpisodeBatchSource::decode_into(const SampledBatch& plan, std::uint64_t plan_row, detail::BatchSlot& slot,
                                     std::size_t r) const {
  const std::size_t T = options_.block_size;
  const std::int64_t pad = options_.pad_token_id;
  const bool contract = options_.contract_fields;
  std::int64_t* x = slot.x.data() + r * T;
  std::int64_t* y = slot.y.data() + r * T;
  // With the contract the mask is written once, as the token weights it equals.
  float* weights = contract ? slot.token_weights.data() + r * T : nullptr;
  float* m = !options_.with_mask ? nullptr : contract ? weights : slot.mask.data() + r * T;
  const std::int64_t id = sampler_.row_episode(plan, plan_row);
  slot.episode_ids[r] = id;

  std::size_t x_count = 0;  // real tokens in x: t[0:min(n, T)]
  std::size_t y_count = 0;  // real tokens in y: t[1:n], the row's input positions with a label
  if (id >= 0) {
    const auto episode = static_cast<std::uint64_t>(id);
    const SftWindow window = windows_.window(episode);
    const std::size_t n = window.size();
    x_count = std::min(n, T);
    y_count = n == 0 ? 0 : std::min(n - 1, T);
    windows_.read_tokens(episode, window, 0, x_count, x);
    windows_.read_tokens(episode, window, 1, y_count, y);
    if (m != nullptr) windows_.read_mask(episode, window, 1, y_count, m);
  }
  std::fill(x + x_count, x + T, pad);
  std::fill(y + y_count, y + T, pad);
  if (m != nullptr) std::fill(m + y_count, m + T, 0.0f);
  slot.real_positions += y_count;
  if (!contract) return;

  // The contract's view of the row: one sequence of y_count positions, then padding.
  // The weights already hold the mask when it is on (and 0 on padding).
  std::int64_t* labels = slot.labels.data() + r * T;
  std::int32_t* positions = slot.position_ids.data() + r * T;
  if (m == nullptr) {
    std::fill(weights, weights + y_count, 1.0f);
    std::fill(weights + y_count, weights + T, 0.0f);
  }
  for (std::size_t i = 0; i < y_count; ++i) {
    labels[i] = weights[i] != 0.0f ? y[i] : options_.ignore_index;
    positions[i] = static_cast<std::int32_t>(i);
  }
  if (y_count > 0) slot.add_sequence(y_count);
  // x keeps its last real token (or pad) after the labelled positions, as the padding
  // rule says; the contract counts those positions as padding.
  std::fill(labels + y_count, labels + T, options_.ignore_index);
  std::iota(positions + y_count, positions + T, 0);
  if (y_count < T) slot.add_sequence(T - y_count);
}

void EpisodeBatchSource::will_need(const BatchPlan& batch_plan) const noexcept {
  const SampledBatch& plan = batch_plan.mode_data_as<SampledBatch>();
  const std::uint64_t rows = sampler_.settings().batch_size;
  for (std::uint64_t r = 0; r < rows; ++r) {
    const std::int64_t id = sampler_.row_episode(plan, r);
    if (id >= 0) split_.prefetch_episode(static_cast<std::uint64_t>(id), options_.block_size + 1);
  }
}

}  // namespace tokenfeed
