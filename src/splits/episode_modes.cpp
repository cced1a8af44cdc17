#include "splits/episode_modes.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "dataset/token_stream.hpp"
#include "splits/shape_plan.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {

// ---- EpisodeModes ----

void EpisodeModes::add_order_fields(const Config& settled, OrderFields& fields) const {
  fields["episode_min_tokens"] = std::to_string(settled.episode_min_tokens);
}

EpisodeSplitOptions EpisodeModes::split_options(const Config& settled) {
  EpisodeSplitOptions options;
  options.token_dtype = settled.token_dtype;
  options.mask_dtype = settled.mask_dtype;
  options.want_mask = settled.use_loss_mask.value_or(true);  // auto maps the masks that exist
  return options;
}

std::unique_ptr<EpisodeWindows> EpisodeModes::windows(const ResolvedOptions& settled, const EpisodeSplit& split) {
  const Config& c = settled.config;
  return std::make_unique<EpisodeWindows>(split, static_cast<std::size_t>(c.block_size) + 1, c.truncation,
                                          settled.metadata.special_tokens);
}

std::vector<const EpisodeWindows*> EpisodeModes::stage_windows(const ResolvedOptions& settled, const std::string& name,
                                                               SplitData& data) {
  const Config& config = settled.config;
  std::vector<std::uint64_t> lengths;  // its own schedule's, or a mixture's as its source
  if (const auto schedule = shape_schedule_of(config, name)) {
    for (const ShapeSchedule::Stage& stage : schedule->stages()) lengths.push_back(stage.block_size);
  }
  if (name == "train") {
    lengths.insert(lengths.end(), settled.mixture_block_sizes.begin(), settled.mixture_block_sizes.end());
  }
  std::vector<const EpisodeWindows*> stage_windows;
  for (const std::uint64_t length : lengths) {
    const auto S = static_cast<std::size_t>(length) + 1;
    const bool known = S == data.windows->S() || std::any_of(stage_windows.begin(), stage_windows.end(),
                                                             [S](const EpisodeWindows* w) { return w->S() == S; });
    if (known) continue;
    data.stage_windows.push_back(
        std::make_unique<EpisodeWindows>(*data.episodes, S, config.truncation, settled.metadata.special_tokens));
    stage_windows.push_back(data.stage_windows.back().get());
  }
  return stage_windows;
}

std::unique_ptr<EpisodeSampler> EpisodeModes::sampler(const Config& settled, const EpisodeSplit& split, IdList kept,
                                                      EpisodeSampler::Settings settings, bool packer_cuts) {
  if (settled.truncation != Truncation::split)
    return std::make_unique<EpisodeSampler>(std::move(kept), std::move(settings));
  const EpisodeSpans spans = split.spans();
  // Under a sequence-length curriculum the rows are numbered by their first tokens: in epoch
  // mode the documents are cut at each row's length from the token reached, in random mode
  // a row draws a piece at its step's length (EpisodeSampler). Packed rows of changing
  // length: the packer cuts them (pack_pieces) from the documents.
  const bool cut = packer_cuts || (settings.schedule && settings.schedule->changes_block_size()) ||
                   !settings.draw_block_sizes.empty();
  auto pieces = std::make_shared<const DocumentPieces>(
      std::move(kept), static_cast<std::uint64_t>(settled.block_size) + 1,
      [&spans](std::uint64_t id) { return spans[id].length; },
      cut ? DocumentPieces::Numbering::tokens : DocumentPieces::Numbering::pieces);
  return std::make_unique<EpisodeSampler>(std::move(pieces), std::move(settings));
}

bool EpisodeModes::reads_documents(const Config& settled, const std::string& name) {
  return !EpisodeSplit::looks_like_episode_split(settled.dataset_dir / name) &&
         TokenStreamSplit::has_split(settled.dataset_dir, name, settled.val_prefix, document_hash_split(settled));
}

EpisodeSplit EpisodeModes::open_episodes(const Config& settled, const std::string& name) {
  if (settled.val_fraction > 0.0 && !reads_documents(settled, "train")) {
    throw Error(ErrorKind::config,
                "config key 'val_fraction' (val as a fraction of the documents) chooses among the documents of "
                "Megatron pairs or datatrove files, but '" +
                    settled.dataset_dir.string() + "' is an episode-indexed dataset (" +
                    std::string(to_string(settled.dataset_mode)) +
                    " takes its val from its val split); unset val_fraction");
  }
  if (reads_documents(settled, name)) {
    return EpisodeSplit::open_documents(settled.dataset_dir, name, split_options(settled), settled.val_prefix,
                                        document_hash_split(settled));
  }
  return EpisodeSplit::open(settled.dataset_dir / name, split_options(settled));
}

std::unique_ptr<DatasetSplit> EpisodeModes::open_split(const ResolvedOptions& settled, const std::string& name) const {
  const Config& config = settled.config;
  const std::filesystem::path dir = config.dataset_dir / name;
  auto data = std::make_unique<SplitData>();
  const EpisodeSplit& episodes = data->episodes.emplace(open_episodes(config, name));
  IdList kept = kept_episodes(episodes, static_cast<std::uint64_t>(config.episode_min_tokens));
  if (kept.empty()) {
    throw Error(
        ErrorKind::format,
        "split '" + dir.string() + "' has no episode left after filtering (" + std::to_string(episodes.num_episodes()) +
            " episodes, none with length >= episode_min_tokens=" + std::to_string(config.episode_min_tokens) + ")");
  }
  const bool mask = episodes.has_mask();
  data->fingerprint = episodes.fingerprint();
  data->windows = windows(settled, episodes);
  EpisodeSampler::Settings settings = row_sampler_settings(config, name);
  // A mixture's source drawing pieces at random under the mixture's sequence-length
  // schedule: each row among the pieces at its step's length.
  if (name == "train" && config.dataset_mode == DatasetMode::sft_episode && config.truncation == Truncation::split &&
      settings.mode == SamplingMode::random) {
    settings.draw_block_sizes = settled.mixture_block_sizes;
  }
  data->sampler =
      sampler(config, episodes, std::move(kept), std::move(settings), packed_rows_change_length(config, name));
  data->orders = std::make_unique<EpochOrders>(*data->sampler);
  DatasetSplit::Description description{{"episodes", "first_episode_ids", "kept_"},
                                        " kept episodes",
                                        " pad_id=" + std::to_string(*config.pad_token_id) + " mask=" + bool_text(mask),
                                        {}};
  SplitInfo& figures = description.figures;
  figures.name = name;
  figures.episodes = episodes.num_episodes();
  figures.kept_episodes = data->sampler->kept_size();
  figures.tokens = episodes.total_tokens();
  figures.shards = episodes.shards().size();
  figures.mask = mask;
  const std::string debug_line = "[tokenfeed] split=" + name + " episodes=" + std::to_string(episodes.num_episodes()) +
                                 " kept=" + std::to_string(data->sampler->kept_size()) +
                                 " tokens=" + std::to_string(episodes.total_tokens()) +
                                 " shards=" + std::to_string(episodes.shards().size()) +
                                 " dtype=" + to_string(episodes.token_dtype()) + " mask=" + bool_text(mask);
  // The buffers hold the longest rows of any stage (a sequence-length schedule's).
  const detail::BatchShape shape =
      batch_shape_of(config, largest_batch_rows(config, name), mask, largest_block_size(config, name));
  std::unique_ptr<DatasetSplit> split = split_over(settled, name, std::move(data), shape, std::move(description));
  split->check_forms_a_batch();
  log_line(LogLevel::debug, debug_line);
  return split;
}

OpenedSplits EpisodeModes::open_splits(ResolvedOptions& settled) const {
  Config& c = settled.config;
  OpenedSplits splits;
  std::error_code ec;
  for (const char* name : kSplitNames) {
    if (!std::filesystem::exists(c.dataset_dir / name, ec) && !reads_documents(c, name)) continue;
    const DatasetSplit& split = *splits.emplace(name, open_split(settled.for_split(name), name)).first->second;
    // The dtype inferred for train is the dataset's: val is validated with it rather than
    // inferred on its own, so the two can never be read at different widths.
    if (!c.token_dtype) c.token_dtype = split.data().episodes->token_dtype();
  }
  // The token dtype is now the one every split agreed on (or was given); the mask's is
  // train's.
  if (!c.mask_dtype) c.mask_dtype = splits.at("train")->data().episodes->mask_file_dtype();
  std::string with, without;
  for (const auto& [name, split] : splits) {
    std::string& list = split->data().episodes->mask_files_present() ? with : without;
    list += (list.empty() ? "" : ", ") + name;
  }
  settle_use_loss_mask(c, with, without);
  return splits;
}

// ---- EpisodeModeBuilder: sft_episode ----

void EpisodeModeBuilder::add_order_fields(const Config& settled, OrderFields& fields) const {
  EpisodeModes::add_order_fields(settled, fields);
  if (settled.truncation != Truncation::split) return;
  fields["block_size"] = std::to_string(settled.block_size);
  fields["truncation"] = to_string(settled.truncation);
}

EpisodeBatchSource::Options EpisodeModeBuilder::source_options(const Config& settled, bool with_mask) {
  EpisodeBatchSource::Options options{settled.pad_token_id.value_or(0), static_cast<std::size_t>(settled.block_size),
                                      with_mask, settled.ignore_index, settled.contract_fields};
  const auto chose = [&settled](BatchField field) { return (settled.fields & batch_field_bit(field)) != 0; };
  options.write_y = chose(BatchField::y);
  options.write_contract =
      chose(BatchField::labels) || chose(BatchField::position_ids) || chose(BatchField::cu_seqlens);
  return options;
}

EpisodeSampler::Settings EpisodeModeBuilder::row_sampler_settings(const Config& settled,
                                                                  const std::string& name) const {
  return sampler_settings(settled, name);
}

std::unique_ptr<DatasetSplit> EpisodeModeBuilder::split_over(const ResolvedOptions& settled, const std::string& name,
                                                             std::unique_ptr<SplitData> data,
                                                             const detail::BatchShape& shape,
                                                             DatasetSplit::Description description) const {
  const Config& config = settled.config;
  // Under a sequence-length schedule a row keeps its episode's window at its batch's length.
  std::vector<const EpisodeWindows*> stage_windows = EpisodeModes::stage_windows(settled, name, *data);
  auto episodes =
      std::make_unique<EpisodeBatchSource>(*data->episodes, *data->orders, *data->windows,
                                           source_options(config, shape.with_mask), std::move(stage_windows));
  return split_of_sampled_rows(name, config, std::move(data), std::move(episodes), shape, std::move(description));
}

}  // namespace tokenfeed
