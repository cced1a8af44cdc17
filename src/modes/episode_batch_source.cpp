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

void EpisodeBatchSource::decode_id(std::int64_t id, detail::BatchSlot& slot, std::size_t r) const {
  const std::size_t T = options_.block_size;
  const std::int64_t pad = options_.pad_token_id;
  const bool contract = options_.contract_fields;
  NextTokenFields row;
  row.x = slot.x.data() + r * T;
  row.y = slot.y.data() + r * T;
  // With the contract the mask is written once, as the token weights it equals (all 1
  // without a mask); without it, the mask is written when it is on.
  if (contract) {
    row.weights = slot.token_weights.data() + r * T;
    row.labels = slot.labels.data() + r * T;
    row.positions = slot.position_ids.data() + r * T;
  } else if (options_.with_mask) {
    row.weights = slot.mask.data() + r * T;
  }
  slot.episode_ids[r] = id;

  std::size_t x_count = 0;  // real tokens in x: t[0:min(n, T)]
  std::size_t y_count = 0;  // real tokens in y: t[1:n], the row's input positions with a label
  if (id >= 0) {
    const EpisodeData episode = windows_.data(static_cast<std::uint64_t>(id));
    const SftWindow window = windows_.window(episode);
    const std::size_t n = window.size();
    x_count = std::min(n, T);
    y_count = n == 0 ? 0 : std::min(n - 1, T);
    windows_.write_targets(episode, window, y_count, options_.with_mask, row, options_.ignore_index);
    // x keeps its last real token (or pad) after the labelled positions, as the padding
    // rule says; the contract counts those positions as padding.
    if (x_count > y_count) windows_.read_tokens(episode, window, y_count, x_count - y_count, row.x + y_count);
  }
  std::fill(row.x + x_count, row.x + T, pad);
  std::fill(row.y + y_count, row.y + T, pad);
  if (row.weights != nullptr) std::fill(row.weights + y_count, row.weights + T, 0.0f);
  slot.real_positions += y_count;
  if (!contract) return;

  // The contract's view of the row: one sequence of y_count positions, then padding.
  if (y_count > 0) slot.add_sequence(y_count);
  std::fill(row.labels + y_count, row.labels + T, options_.ignore_index);
  std::iota(row.positions + y_count, row.positions + T, 0);
  if (y_count < T) slot.add_sequence(T - y_count);
}

void EpisodeBatchSource::prefetch_id(std::int64_t id) const noexcept {
  if (id >= 0) windows_.prefetch_start(static_cast<std::uint64_t>(id), options_.with_mask);
}

void EpisodeBatchSource::will_need_id(std::int64_t id) const noexcept {
  split_.prefetch_episode(static_cast<std::uint64_t>(id), options_.block_size + 1);
}

}  // namespace tokenfeed
