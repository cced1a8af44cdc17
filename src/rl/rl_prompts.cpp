// RLPrompts (include/tokenfeed/rl.hpp): the prompts of an episode-indexed dataset in the
// loader's epoch order, one per pull index, through the same EpisodeSampler.
#include <cstdio>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "dataset/dataset_metadata.hpp"
#include "dataset/episode_dataset.hpp"
#include "util/id_list.hpp"
#include "loader/launcher_ranks.hpp"
#include "loader/resolved_options.hpp"
#include "modes/epoch_orders.hpp"
#include "sampling/episode_sampler.hpp"
#include "util/hash.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/rl.hpp"

namespace tokenfeed {

namespace fs = std::filesystem;

struct RLPrompts::Impl {
  Config config;
  std::optional<EpisodeSplit> split;
  std::optional<EpisodeSampler> sampler;
  std::optional<EpochOrders> orders;  // the sampler's epoch orders in use, the next made ahead
  std::int64_t pad = 0;
  std::uint64_t fingerprint = 0;
};

RLPrompts::RLPrompts(Config config, std::size_t max_tokens) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  // The batch shape is the GroupBatcher's; these keys only need to pass validation.
  if (config.batch_size <= 0) config.batch_size = 1;
  if (config.block_size <= 0) config.block_size = static_cast<std::int64_t>(max_tokens);
  validate_config(config);
  check_dataset_dir(config);
  const LauncherRanks ranks = resolve_ranks(config);  // rank and world_size may come from the launcher
  config.rank = ranks.rank;
  config.world_size = ranks.world_size;
  // The loader's rules for the token dtype and the pad id (resolved_options.hpp), except
  // that a dataset recording no pad or end-of-text id pads with 0 rather than failing.
  const DatasetMetadata metadata = read_dataset_metadata(config.dataset_dir);
  config.token_dtype = settle_dtype(config.token_dtype, metadata.token_dtype, config_key("token_dtype"),
                                    (config.dataset_dir / "dataset_metadata.json").string());
  const std::optional<PadChoice> pad = pad_from_metadata(config, metadata);
  if (pad) config.pad_token_id = pad->id;
  s.pad = config.pad_token_id.value_or(0);
  if (!config.batch_sampling_mode) config.batch_sampling_mode = SamplingMode::epoch;

  const fs::path dir = config.dataset_dir / "train";
  if (!EpisodeSplit::looks_like_episode_split(dir)) {
    throw Error(ErrorKind::format, "RL prompts need an episode-indexed split (episodes.idx) in '" + dir.string() + "'");
  }
  EpisodeSplitOptions options;
  options.token_dtype = config.token_dtype;
  s.split.emplace(EpisodeSplit::open(dir, options));
  IdList kept = IdList::for_ids_below(s.split->num_episodes());
  for (std::uint64_t id : kept_episodes(*s.split, static_cast<std::uint64_t>(config.episode_min_tokens))) {
    if (s.split->spans()[id].length <= max_tokens) kept.push_back(id);
  }
  if (kept.size() < static_cast<std::uint64_t>(config.world_size)) {
    throw Error(ErrorKind::config, "split '" + dir.string() + "' has " + std::to_string(kept.size()) +
                                       " prompts with episode_min_tokens=" + std::to_string(config.episode_min_tokens) +
                                       " <= length <= " + std::to_string(max_tokens) +
                                       ", fewer than world_size=" + std::to_string(config.world_size));
  }
  EpisodeSampler::Settings settings;
  settings.mode = *config.batch_sampling_mode;
  settings.shuffle = config.epoch_shuffle;
  settings.drop_last = true;  // every pull index is a real prompt
  settings.seed = static_cast<std::uint32_t>(config.epoch_seed);
  settings.batch_size = 1;
  settings.world_size = static_cast<std::uint64_t>(config.world_size);
  settings.rank = static_cast<std::uint64_t>(config.rank);
  settings.split = "train";
  s.sampler.emplace(std::move(kept), settings);
  s.orders.emplace(*s.sampler);

  Hasher h;
  h.add(std::string_view("tokenfeed-rl-prompts"));
  h.add(s.split->fingerprint());
  h.add(static_cast<std::uint64_t>(settings.mode));
  h.add(settings.shuffle ? 1 : 0);
  h.add(settings.seed);
  h.add(settings.world_size);
  h.add(settings.rank);
  h.add(static_cast<std::uint64_t>(config.episode_min_tokens));
  h.add(max_tokens);
  s.fingerprint = h.digest();
  s.config = std::move(config);
}

RLPrompts::~RLPrompts() = default;

Prompt RLPrompts::at(std::uint64_t index) const {
  const SampledBatch plan = impl_->orders->sample(index);
  const std::int64_t id = impl_->sampler->row_episode(plan, 0);
  Prompt p;
  p.index = index;
  p.epoch = plan.epoch;
  p.episode = id;
  const std::uint64_t length = impl_->split->spans()[static_cast<std::uint64_t>(id)].length;
  p.tokens.resize(length);
  impl_->split->read_tokens(static_cast<std::uint64_t>(id), 0, length, p.tokens.data());
  return p;
}

std::uint64_t RLPrompts::size() const noexcept { return impl_->sampler->size(); }
std::uint64_t RLPrompts::per_epoch() const noexcept { return impl_->sampler->batches_per_epoch(); }
std::int64_t RLPrompts::pad_token_id() const noexcept { return impl_->pad; }
const Config& RLPrompts::config() const noexcept { return impl_->config; }

std::string RLPrompts::fingerprint() const {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(impl_->fingerprint));
  return text;
}

}  // namespace tokenfeed
