#include "modes/episode_batch_source.hpp"

#include <algorithm>
#include <utility>

namespace tokenfeed {

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

EpisodeBatchSource::EpisodeBatchSource(const EpisodeSplit& split, const EpochOrders& orders,
                                       const EpisodeWindows& windows, Options options,
                                       std::vector<const EpisodeWindows*> stage_windows)
    : SampledRowSource(orders), split_(split), windows_(std::move(stage_windows)), options_(options) {
  windows_.insert(windows_.begin(), &windows);
  for (const EpisodeWindows* w : windows_) longest_ = std::max(longest_, w->S());
  split_.advise_random_access();  // rows are read in shuffled order; see will_need
}

const EpisodeWindows& EpisodeBatchSource::windows_for(std::size_t cols) const noexcept {
  for (const EpisodeWindows* w : windows_) {
    if (w->S() == cols + 1) return *w;
  }
  return *windows_.front();  // unreachable for a settled schedule (see REQUIRES)
}

void EpisodeBatchSource::decode_id(std::int64_t id, detail::BatchSlot& slot, std::size_t r) const {
  const std::size_t T = slot.cols;  // the batch's block size (options_.block_size unless scheduled)
  const EpisodeWindows& windows = windows_for(T);
  const std::int64_t pad = options_.pad_token_id;
  const bool contract = options_.contract_fields;
  // What the trainer does not read (Config::fields) is left unwritten.
  NextTokenFields row;
  row.x = slot.x.data() + r * T;
  if (options_.write_y) row.y = slot.y.data() + r * T;
  const bool contract_written = contract && options_.write_contract;
  // With the contract the mask is written once, as the token weights it equals (all 1
  // without a mask); without it, the mask is written when it is on.
  if (contract) {
    row.weights = slot.token_weights.data() + r * T;
    if (contract_written) {
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
    const EpisodeWindows::Kept kept = windows.kept(static_cast<std::uint64_t>(id), sampler_.pieces());
    const EpisodeData& episode = kept.data;
    const SftWindow& window = kept.window;
    const std::size_t n = window.size();
    const std::size_t x_count = std::min(n, T);  // real tokens in x: t[0:min(n, T)]
    y_count = n == 0 ? 0 : std::min(n - 1, T);
    windows.write_targets(episode, window, y_count, options_.with_mask, row, options_.ignore_index);
    write_padding_run(T - y_count, padding_from(y_count), pad, options_.ignore_index);
    if (x_count > y_count) windows.read_tokens(episode, window, y_count, x_count - y_count, row.x + y_count);
  } else {
    write_padding_run(T, padding_from(0), pad, options_.ignore_index);
  }
  slot.real_positions += y_count;
  if (!contract_written) return;

  // The contract's view of the row: one sequence of y_count positions, then padding.
  if (y_count > 0) slot.add_sequence(y_count);
  if (y_count < T) slot.add_sequence(T - y_count);
}

void EpisodeBatchSource::prefetch_id(std::int64_t id) const noexcept {
  if (id >= 0) windows_.front()->prefetch_start(episode_of(id), options_.with_mask);
}

void EpisodeBatchSource::will_need_id(std::int64_t id) const noexcept {
  split_.prefetch_episode(episode_of(id), longest_);
}

}  // namespace tokenfeed
