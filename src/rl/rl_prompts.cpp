// RLPrompts (include/tokenfeed/rl.hpp): the prompts of an episode-indexed dataset in the
// loader's epoch order, one per pull index, through the same EpisodeSampler; its config is
// settled by resolve_prompt_options (splits/resolved_options.hpp) with the loader's rules.
#include <algorithm>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "dataset/content_fingerprint.hpp"
#include "dataset/episode_dataset.hpp"
#include "util/id_list.hpp"
#include "splits/fingerprint.hpp"
#include "splits/mode_builder.hpp"
#include "splits/resolved_options.hpp"
#include "modes/epoch_orders.hpp"
#include "sampling/episode_sampler.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/rl.hpp"

namespace tokenfeed {

namespace fs = std::filesystem;

namespace {

// Train's order with one prompt per pull index and every pull a real prompt (an epoch's
// remainder smaller than the data-parallel size skipped).
EpisodeSampler::Settings prompt_order_settings(const Config& settled) {
  // One prompt per pull index, whatever the batches' shapes: a shape_schedule is the
  // GroupBatcher's.
  Config unscheduled = settled;
  unscheduled.shape_schedule.clear();
  EpisodeSampler::Settings order = sampler_settings(unscheduled, "train");
  order.batch_size = 1;
  order.drop_last = true;
  return order;
}

}  // namespace

struct RLPrompts::Impl {
  Config config;
  std::optional<EpisodeSplit> split;
  std::optional<EpisodeSampler> sampler;
  std::optional<EpochOrders> orders;  // the sampler's epoch orders in use, the next made ahead
  std::int64_t pad = 0;
  std::uint64_t vocab_size = 0;
  std::string fingerprint;  // fingerprint_of("tokenfeed-rl-prompts", ...)
};

RLPrompts::RLPrompts(Config config, std::size_t max_tokens) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  // A prompt must leave room for a completion in every stage's rows.
  for (const ShapeStage& stage : config.shape_schedule) {
    if (stage.block_size && *stage.block_size > 0)
      max_tokens = std::min(max_tokens, static_cast<std::size_t>(*stage.block_size));
  }
  ResolvedOptions settled = resolve_prompt_options(std::move(config), max_tokens);
  Config& c = settled.config;
  s.pad = c.pad_token_id.value_or(0);
  s.vocab_size = static_cast<std::uint64_t>(std::max<std::int64_t>(settled.metadata.vocab_size.value_or(0), 0));

  const fs::path dir = c.dataset_dir / "train";
  if (detect_split_layout(c.dataset_dir, "train") != DatasetMode::sft_episode) {
    throw Error(ErrorKind::format, "RL prompts need an episode-indexed split (episodes.idx) in '" + dir.string() + "'");
  }
  EpisodeSplitOptions options;
  options.token_dtype = c.token_dtype;
  s.split.emplace(EpisodeSplit::open(dir, options));
  IdList kept = IdList::for_ids_below(s.split->num_episodes());
  for (std::uint64_t id : kept_episodes(*s.split, static_cast<std::uint64_t>(c.episode_min_tokens))) {
    if (s.split->spans()[id].length <= max_tokens) kept.push_back(id);
  }
  if (kept.size() < data_parallel_size(c)) {
    throw Error(ErrorKind::config, "split '" + dir.string() + "' has " + std::to_string(kept.size()) +
                                       " prompts with episode_min_tokens=" + std::to_string(c.episode_min_tokens) +
                                       " <= length <= " + std::to_string(max_tokens) +
                                       ", fewer than the data-parallel size " + std::to_string(data_parallel_size(c)));
  }
  const EpisodeSampler::Settings settings = prompt_order_settings(c);
  s.sampler.emplace(std::move(kept), settings);
  s.orders.emplace(*s.sampler);

  const FingerprintPart parts[] = {s.split->fingerprint(),
                                   content_fingerprint(dir),  // the prompts' tokens, not only their lengths
                                   static_cast<std::uint64_t>(settings.mode),
                                   std::uint64_t{settings.shuffle ? 1U : 0U},
                                   static_cast<std::uint64_t>(settings.seed),
                                   static_cast<std::uint64_t>(settings.world_size),
                                   static_cast<std::uint64_t>(settings.rank),
                                   static_cast<std::uint64_t>(c.episode_min_tokens),
                                   static_cast<std::uint64_t>(max_tokens)};
  s.fingerprint = fingerprint_of("tokenfeed-rl-prompts", parts);
  s.config = std::move(c);
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
std::uint64_t RLPrompts::vocab_size() const noexcept { return impl_->vocab_size; }
const Config& RLPrompts::config() const noexcept { return impl_->config; }

std::string RLPrompts::fingerprint() const { return impl_->fingerprint; }

}  // namespace tokenfeed
