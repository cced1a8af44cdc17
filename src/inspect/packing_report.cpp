// With block_size: what each truncation rule cuts of an episode split, and (packed) how a
// run with dataset_mode=sft_packed packs epoch 0, through the loader's own classes.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "inspect/split_reports.hpp"
#include "modes/episode_window.hpp"
#include "modes/packed_batch_source.hpp"
#include "sampling/episode_sampler.hpp"
#include "splits/packed_mode.hpp"

namespace tokenfeed {
namespace {

// Trained (mask != 0) label positions of an episode's kept sequence: mask[1:] of it.
std::uint64_t trained_positions(const EpisodeWindows& windows, std::uint64_t episode, const SftWindow& window,
                                std::vector<float>& scratch) {
  if (window.size() < 2) return 0;
  scratch.resize(window.size() - 1);
  windows.read_mask(episode, window, 1, scratch.size(), scratch.data());
  return static_cast<std::uint64_t>(std::count_if(scratch.begin(), scratch.end(), [](float v) { return v != 0.0f; }));
}

// What `rule` cuts of the kept episodes longer than S = block_size + 1: tokens, and the
// trained ones among them when the split has a mask.
TruncationCost truncation_cost(const EpisodeSplit& split, const IdList& kept, std::size_t S, Truncation rule,
                               const std::optional<SpecialTokenIds>& special_tokens) {
  const EpisodeWindows windows(split, S, rule, special_tokens);
  std::vector<float> scratch;
  std::uint64_t dropped_tokens = 0, lost_trained = 0;
  for (const std::uint64_t e : kept) {
    const std::uint64_t n = split.spans()[e].length;
    if (n <= S) continue;
    const SftWindow window = windows.window(e);
    dropped_tokens += n - window.size();
    if (split.has_mask()) {
      SftWindow whole;
      whole.head_end = static_cast<std::size_t>(n);
      const std::uint64_t all = trained_positions(windows, e, whole, scratch);
      lost_trained += all - trained_positions(windows, e, window, scratch);
    }
  }
  return TruncationCost{rule, dropped_tokens, split.has_mask() ? std::optional(lost_trained) : std::nullopt};
}

// What a run with dataset_mode=sft_packed and the request's truncation, epoch_seed and
// pack_lookahead packs in epoch 0 (the same kept windows, numpy-compatible order and
// packer), against one padded episode per row.
PackingFigures packing(const InspectRequest& r, const ResolvedOptions& run, const std::string& name,
                       const EpisodeSplit& split, const IdList& kept) {
  const auto T = static_cast<std::uint64_t>(r.block_size);
  const std::unique_ptr<EpisodeWindows> windows = EpisodeModes::windows(run, split);
  const std::unique_ptr<EpisodeSampler> sampler =
      EpisodeModes::sampler(run.config, split, kept, PackedModeBuilder::order_settings(run.config, name));
  const EpochOrders orders(*sampler);
  // At the key's block_size throughout (a sequence-length schedule's other lengths aside).
  PackedBatchSource::Options options = PackedModeBuilder::packing_options(run.config, name, false);
  options.schedule = nullptr;
  const PackedBatchSource source(split, *windows, orders, options);
  const std::shared_ptr<const PackedEpoch> packed = source.packing(0);
  PackingFigures f;
  f.packed_rows = packed->rows();
  f.packed_positions = packed->positions;
  f.packed_cells = packed->rows() * T;
  // Padded sft_episode rows hold the same positions, one row per sampled id (a kept episode,
  // or with truncation=split a piece): its kept length - 1.
  f.episode_rows = sampler->size();
  for (std::uint64_t i = 0; i < sampler->size(); ++i) {
    f.episode_positions += windows->kept(sampler->id_at(i), sampler->pieces()).window.size() - 1;
  }
  f.episode_cells = sampler->size() * T;
  if (const DocumentPieces* pieces = sampler->pieces()) {
    // What split costs: the documents it cuts (the padding left is in the packed figures).
    PackingFigures::Cut cut{kept.size(), 0, pieces->size()};
    for (std::uint64_t k = 0; k < cut.documents; ++k) {
      if (pieces->pieces_in(k) > 1) ++cut.cut;
    }
    f.split = cut;
  }
  f.episode_min_tokens = static_cast<std::uint64_t>(run.config.episode_min_tokens);
  return f;
}

}  // namespace

EpisodeBlockFigures truncation_and_packing(const InspectRequest& r, const ResolvedOptions& run, const std::string& name,
                                           const EpisodeSplit& split, const IdList& kept) {
  const DatasetMetadata& meta = run.metadata;
  const auto S = static_cast<std::size_t>(r.block_size) + 1;
  EpisodeBlockFigures f;
  for (const std::uint64_t e : kept) {
    if (split.spans()[e].length > S) ++f.longer;
  }
  f.turns_known = meta.special_tokens.has_value();
  f.truncation.push_back(truncation_cost(split, kept, S, Truncation::right, meta.special_tokens));
  if (f.turns_known)
    f.truncation.push_back(truncation_cost(split, kept, S, Truncation::drop_oldest_turns, meta.special_tokens));
  if (r.packed) f.packing = packing(r, run, name, split, kept);
  return f;
}

}  // namespace tokenfeed
