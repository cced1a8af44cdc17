#include "modes/episode_batch_source.hpp"

#include <algorithm>
#include <numeric>

namespace tokenfeed {
namespace {

class EpisodeDeferredFields final : public detail::DeferredFields {
 public:
  void write_y(detail::BatchSlot& slot, const detail::BatchShape& shape) const noexcept override {
    const std::size_t T = shape.cols;
    for (std::size_t r = 0; r < shape.rows; ++r) {
      const std::size_t n = std::min<std::size_t>(slot.row_targets[r], T);
      const std::int64_t* __restrict x = slot.x.data() + r * T;
      std::int64_t* __restrict y = slot.y.data() + r * T;
      if (n > 0) {
        std::copy_n(x + 1, n - 1, y);
        y[n - 1] = slot.row_last_target[r];
      }
      std::fill(y + n, y + T, shape.pad_token_id);
    }
  }

  void write_contract(detail::BatchSlot& slot, const detail::BatchShape& shape) const noexcept override {
    const std::size_t T = shape.cols;
    const std::int64_t ignore = shape.ignore_index;
    slot.begin_sequences();
    for (std::size_t r = 0; r < shape.rows; ++r) {
      const std::size_t at = r * T;
      const std::size_t n = std::min<std::size_t>(slot.row_targets[r], T);
      const std::int64_t* __restrict y = slot.y.data() + at;
      const float* __restrict w = slot.token_weights.data() + at;
      std::int64_t* __restrict labels = slot.labels.data() + at;
      for (std::size_t i = 0; i < T; ++i) labels[i] = w[i] != 0.0f ? y[i] : ignore;
      std::int32_t* positions = slot.position_ids.data() + at;
      std::iota(positions, positions + n, 0);
      std::iota(positions + n, positions + T, 0);
      if (n > 0) slot.add_sequence(n);
      if (n < T) slot.add_sequence(T - n);
    }
  }
};

}  // namespace

const detail::DeferredFields& episode_deferred_fields() noexcept {
  static const EpisodeDeferredFields fields;
  return fields;
}

void finish_row_padding(detail::BatchSlot& slot, std::size_t row, std::size_t cols, std::size_t real,
                        std::int64_t pad_token_id, std::int64_t ignore_index) noexcept {
  const std::size_t at = row * cols + real;
  NextTokenFields padding;
  padding.x = slot.x.data() + at;
  padding.weights = slot.token_weights.data() + at;
  padding.labels = slot.labels.data() + at;
  padding.positions = slot.position_ids.data() + at;
  write_padding_run(cols - real, padding, pad_token_id, ignore_index);
  if (real < cols) slot.add_sequence(cols - real);
}

void EpisodeBatchSource::decode_id(std::int64_t id, detail::BatchSlot& slot, std::size_t r) const {
  const std::size_t T = options_.block_size;
  const std::int64_t pad = options_.pad_token_id;
  const bool contract = options_.contract_fields;
  // While the trainer does not read y, or the contract's own fields, the pool defers them
  // to the trainer's first read (BatchPool::complete_y, complete_contract), which needs
  // only the row's length and its last target besides x and the weights.
  const bool y_deferred = slot.y_deferred.load(std::memory_order_relaxed);
  const bool contract_deferred = slot.contract_deferred.load(std::memory_order_relaxed);
  NextTokenFields row;
  row.x = slot.x.data() + r * T;
  if (!y_deferred) row.y = slot.y.data() + r * T;
  // With the contract the mask is written once, as the token weights it equals (all 1
  // without a mask); without it, the mask is written when it is on.
  if (contract) {
    row.weights = slot.token_weights.data() + r * T;
    if (!contract_deferred) {
      row.labels = slot.labels.data() + r * T;
      row.positions = slot.position_ids.data() + r * T;
    }
  } else if (options_.with_mask) {
    row.weights = slot.mask.data() + r * T;
  }
  // The row's episode (a piece's, with truncation=split), or -1.
  slot.episode_ids[r] = id >= 0 ? static_cast<std::int64_t>(episode_of(id)) : id;

  // The row's labelled positions t[1:n] (y_count of them), then padding from there in
  // every field; x keeps its last real token in the first padding position (the padding
  // rule), which the contract counts as padding.
  std::size_t y_count = 0;
  const auto padding_from = [&row](std::size_t i) {
    NextTokenFields f;
    f.x = row.x + i;
    if (row.y != nullptr) f.y = row.y + i;
    if (row.weights != nullptr) f.weights = row.weights + i;
    if (row.labels != nullptr) f.labels = row.labels + i;
    if (row.positions != nullptr) f.positions = row.positions + i;
    return f;
  };
  if (id >= 0) {
    const EpisodeWindows::Kept kept = windows_.kept(static_cast<std::uint64_t>(id), sampler_.pieces());
    const EpisodeData& episode = kept.data;
    const SftWindow& window = kept.window;
    const std::size_t n = window.size();
    const std::size_t x_count = std::min(n, T);  // real tokens in x: t[0:min(n, T)]
    y_count = n == 0 ? 0 : std::min(n - 1, T);
    windows_.write_targets(episode, window, y_count, options_.with_mask, row, options_.ignore_index);
    write_padding_run(T - y_count, padding_from(y_count), pad, options_.ignore_index);
    if (x_count > y_count) windows_.read_tokens(episode, window, y_count, x_count - y_count, row.x + y_count);
    // The last real target: x's next input, except where the row was cut at block_size.
    if (y_deferred && y_count > 0) windows_.read_tokens(episode, window, y_count, 1, &slot.row_last_target[r]);
  } else {
    write_padding_run(T, padding_from(0), pad, options_.ignore_index);
  }
  slot.real_positions += y_count;
  if (y_deferred || contract_deferred) slot.row_targets[r] = static_cast<std::uint32_t>(y_count);
  if (!contract || contract_deferred) return;

  // The contract's view of the row: one sequence of y_count positions, then padding.
  if (y_count > 0) slot.add_sequence(y_count);
  if (y_count < T) slot.add_sequence(T - y_count);
}

void EpisodeBatchSource::prefetch_id(std::int64_t id) const noexcept {
  if (id >= 0) windows_.prefetch_start(episode_of(id), options_.with_mask);
}

void EpisodeBatchSource::will_need_id(std::int64_t id) const noexcept {
  split_.prefetch_episode(episode_of(id), options_.block_size + 1);
}

}  // namespace tokenfeed
