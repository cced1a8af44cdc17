#include "launch/memory_budget.hpp"

#include <cstdint>

#include "launch/launcher_ranks.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {

namespace {

// ", divided by N local ranks (VARIABLE)" when the job has several processes on this node.
std::string per_local_rank() {
  const LocalRanks ranks = resolve_local_ranks();
  if (ranks.count == 1) return "";
  return ", divided by " + std::to_string(ranks.count) + " local ranks (" + ranks.source + ")";
}

}  // namespace

SplitPipeline::Depths pool_depths(const Config& config, const detail::BatchShape& shape) {
  return SplitPipeline::plan_depths(
      config.prefetch_depth, config.prefetch_memory_mb, detail::BatchPool::bytes_per_slot(shape),
      static_cast<std::size_t>(config.decode_threads), static_cast<std::size_t>(config.max_held_batches));
}

void check_memory_bound(const Config& config, const std::vector<std::pair<std::string, detail::BatchShape>>& splits) {
  const std::uint64_t limit_mb = effective_max_memory_mb(config);
  const auto held = static_cast<std::uint64_t>(config.max_held_batches);
  std::uint64_t total = 0;
  std::string parts;
  for (const auto& [name, shape] : splits) {
    const std::uint64_t slot = detail::BatchPool::bytes_per_slot(shape);
    const std::uint64_t slots = pool_depths(config, shape).max + held;
    // Saturating: an absurd shape must not wrap around to a small figure.
    const std::uint64_t bytes = slot > UINT64_MAX / slots ? UINT64_MAX : slot * slots;
    total = bytes > UINT64_MAX - total ? UINT64_MAX : total + bytes;
    parts += (parts.empty() ? "" : ", ") + name + ": " + std::to_string(slots) + " batches of " +
             std::to_string(slot >> 20) + " MiB";
  }
  if (total / (1ULL << 20) > limit_mb) {
    throw Error(ErrorKind::config,
                "the batch buffers need " + std::to_string(total >> 20) + " MiB (" + parts + "; prefetch_depth plus " +
                    std::to_string(held) +
                    " batches the trainer may hold), more than max_memory_mb=" + std::to_string(limit_mb) +
                    (config.max_memory_mb == 0 ? " (auto: half of the physical memory" + per_local_rank() + ")" : "") +
                    "; lower prefetch_depth, batch_size or block_size, or raise max_memory_mb");
  }
}

}  // namespace tokenfeed
