#include "episode_batch_source.hpp"

#include <algorithm>

namespace tokenfeed {

void EpisodeBatchSource::decode(const BatchPlan& plan, detail::BatchSlot& slot) const {
  const std::size_t rows = slot.episode_ids.size();
  const std::size_t T = block_size_;
  slot.step = plan.step;
  slot.epoch = plan.epoch;
  slot.batch_in_epoch = plan.batch_in_epoch;
  slot.real_rows = sampler_.real_rows(plan);

  for (std::size_t r = 0; r < rows; ++r) {
    std::int64_t* x = slot.x.data() + r * T;
    std::int64_t* y = slot.y.data() + r * T;
    float* m = with_mask_ ? slot.mask.data() + r * T : nullptr;
    const std::int64_t id = sampler_.row_episode(plan, r);
    slot.episode_ids[r] = id;

    std::size_t x_count = 0;  // real tokens in x: t[0:min(n, T)]
    std::size_t y_count = 0;  // real tokens in y: t[1:min(n, T+1)]
    if (id >= 0) {
      const auto episode = static_cast<std::uint64_t>(id);
      const std::uint64_t n = split_.spans()[episode].length;
      x_count = static_cast<std::size_t>(std::min<std::uint64_t>(n, T));
      y_count = n == 0 ? 0 : static_cast<std::size_t>(std::min<std::uint64_t>(n - 1, T));
      split_.read_tokens(episode, 0, x_count, x);
      split_.read_tokens(episode, 1, y_count, y);
      if (m != nullptr) split_.read_mask(episode, 1, y_count, m);
    }
    std::fill(x + x_count, x + T, pad_);
    std::fill(y + y_count, y + T, pad_);
    if (m != nullptr) std::fill(m + y_count, m + T, 0.0f);
  }
}

}  // namespace tokenfeed
