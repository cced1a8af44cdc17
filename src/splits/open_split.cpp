#include "splits/open_split.hpp"

#include <filesystem>
#include <utility>

#include "modes/context_parallel_split.hpp"
#include "modes/episode_batch_source.hpp"
#include "modes/token_stream_batch_source.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {
namespace {

// The split of the sampling layout that fits `config`, over `data` and `source`.
template <typename Source>
std::unique_ptr<DatasetSplit> split_of_layout(const std::string& name, const Config& config,
                                              std::unique_ptr<SplitData> data, std::unique_ptr<Source> source,
                                              const detail::BatchShape& shape, DatasetSplit::Description description) {
  if (*config.batch_sampling_mode != SamplingMode::epoch) {
    return std::make_unique<RandomSplit>(name, config, std::move(data), std::move(source), shape,
                                         std::move(description));
  }
  return std::make_unique<EqualEpochsSplit>(name, config, std::move(data), std::move(source), shape,
                                            std::move(description));
}

// With context_parallel_split, `source` (of whole rows) as this rank's share of them:
// split from whole rows decoded into scratch slots (sft_packed writes its share itself).
// Each row's sequences are cut one by one when they are padded for it, else the whole row.
std::unique_ptr<BatchSource> share_of_rows(std::unique_ptr<BatchSource> source, const Config& config, std::size_t rows,
                                           bool mask) {
  if (!splits_rows_for_context_parallel(config)) return source;
  Config whole = config;
  whole.context_parallel_split = false;
  detail::BatchShape shape = batch_shape_of(whole, rows, mask);
  shape.deferred = nullptr;  // the scratch rows are written whole
  const ContextParallelShare share{static_cast<std::size_t>(config.context_parallel_size),
                                   static_cast<std::size_t>(config.context_parallel_rank.value_or(0)),
                                   pads_sequences_for_context_parallel(config)};
  return std::make_unique<ContextParallelSplitSource>(std::move(source), shape, share);
}

std::unique_ptr<DatasetSplit> open_episode_split(const ResolvedOptions& settled, const std::string& name) {
  const Config& config = settled.config;
  const std::filesystem::path dir = config.dataset_dir / name;
  auto data = std::make_unique<SplitData>();
  const EpisodeSplit& episodes = data->episodes.emplace(EpisodeSplit::open(dir, settled.episode_split_options()));
  IdList kept = kept_episodes(episodes, static_cast<std::uint64_t>(config.episode_min_tokens));
  if (kept.empty()) {
    throw Error(
        ErrorKind::format,
        "split '" + dir.string() + "' has no episode left after filtering (" + std::to_string(episodes.num_episodes()) +
            " episodes, none with length >= episode_min_tokens=" + std::to_string(config.episode_min_tokens) + ")");
  }
  const bool mask = episodes.has_mask();
  data->fingerprint = episodes.fingerprint();
  data->windows = settled.episode_windows(episodes);
  const bool packed = settled.packed_mode();
  data->sampler = settled.episode_sampler(
      episodes, std::move(kept), packed ? settled.packed_order_settings(name) : settled.sampler_settings(name));
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
  const detail::BatchShape shape = batch_shape_of(config, static_cast<std::size_t>(config.batch_size), mask);
  std::unique_ptr<DatasetSplit> split;
  if (packed) {
    auto source = std::make_unique<PackedBatchSource>(episodes, *data->windows, *data->orders,
                                                      settled.packing_options(name, mask));
    split = std::make_unique<PackedEpochsSplit>(name, config, std::move(data), std::move(source), shape,
                                                std::move(description));
  } else {
    std::unique_ptr<BatchSource> source =
        std::make_unique<EpisodeBatchSource>(episodes, *data->orders, *data->windows, settled.episode_options(mask));
    source = share_of_rows(std::move(source), config, shape.rows, mask);
    split = split_of_layout(name, config, std::move(data), std::move(source), shape, std::move(description));
  }
  split->check_forms_a_batch();
  log_line(LogLevel::debug, debug_line);
  return split;
}

std::unique_ptr<DatasetSplit> open_stream_split(const ResolvedOptions& settled, const std::string& name) {
  const Config& config = settled.config;
  auto data = std::make_unique<SplitData>();
  const TokenStreamSplit& stream =
      data->stream.emplace(TokenStreamSplit::open(config.dataset_dir, name, config.token_dtype));
  const auto block = static_cast<std::size_t>(config.block_size);
  const std::uint64_t samples = TokenStreamBatchSource::sample_count(stream, block, *config.batch_sampling_mode);
  data->fingerprint = stream.fingerprint();
  data->sampler = std::make_unique<EpisodeSampler>(EpisodeSampler::IdRange{samples}, settled.sampler_settings(name));
  data->orders = std::make_unique<EpochOrders>(*data->sampler);
  DatasetSplit::Description description{{"windows", "first_window_ids", "sampled_"},
                                        " windows of block_size + 1",
                                        std::string(" document_aware=") + bool_text(config.document_aware),
                                        {}};
  SplitInfo& figures = description.figures;
  figures.name = name;
  figures.windows = data->sampler->size();
  figures.tokens = stream.total_tokens();
  figures.shards = stream.files().size();
  const auto dtype = stream.common_dtype();
  const std::string debug_line = "[tokenfeed] split=" + name + " tokens=" + std::to_string(stream.total_tokens()) +
                                 " files=" + std::to_string(stream.files().size()) +
                                 " dtype=" + (dtype ? to_string(*dtype) : "mixed") + " " +
                                 (*config.batch_sampling_mode == SamplingMode::epoch ? "windows=" : "window_starts=") +
                                 std::to_string(samples) + " document_aware=" + bool_text(config.document_aware);
  std::string no_window;
  if (samples == 0) {
    no_window = "split '" + name + "' of '" + config.dataset_dir.string() + "' has " +
                std::to_string(stream.total_tokens()) +
                " tokens but no file holds one window of block_size + 1 = " + std::to_string(block + 1) + " tokens";
  }
  const auto rows = static_cast<std::size_t>(config.batch_size);
  std::unique_ptr<BatchSource> source =
      std::make_unique<TokenStreamBatchSource>(stream, *data->orders, settled.stream_options());
  source = share_of_rows(std::move(source), config, rows, false);
  auto split = split_of_layout(name, config, std::move(data), std::move(source), batch_shape_of(config, rows, false),
                               std::move(description));
  if (no_window.empty()) {
    split->check_forms_a_batch();
  } else {
    // Like a split too small for one batch (check_forms_a_batch): an error at open for
    // train (of kind format), and for val only when it is used.
    split->refuse_batches(no_window, ErrorKind::format);
  }
  log_line(LogLevel::debug, debug_line);
  return split;
}

}  // namespace

detail::BatchShape batch_shape_of(const Config& c, std::size_t rows, bool mask) {
  const bool episode = c.dataset_mode != DatasetMode::token_stream;
  const bool packed = c.dataset_mode == DatasetMode::sft_packed;
  detail::BatchShape shape;
  shape.rows = rows;
  shape.cols = static_cast<std::size_t>(c.block_size);
  shape.with_mask = mask;
  shape.with_document_fields = c.document_aware;
  shape.y_is_labels = !episode || packed;
  shape.contract_fields = c.contract_fields;
  // sft_episode's mask equals its token weights, so with both only the weights are written.
  shape.mask_is_weights = packed || (episode && c.contract_fields);
  shape.packed = packed;
  shape.padded_sequences = c.contract_fields && pads_sequences_for_context_parallel(c);
  const bool split = splits_rows_for_context_parallel(c);
  if (split) {
    shape.context_parallel = static_cast<std::size_t>(c.context_parallel_size);
    shape.cols /= shape.context_parallel;
  }
  // sft_episode's y and contract fields are derived from x, the weights and the rows'
  // lengths, so a trainer that reads only one of the two views does not pay for the other
  // (not from a context-parallel share of the rows, whose x is not contiguous).
  if (episode && !packed && c.contract_fields && !split) shape.deferred = &episode_deferred_fields();
  shape.pad_token_id = c.pad_token_id.value_or(0);
  shape.ignore_index = c.ignore_index;
  return shape;
}

std::unique_ptr<DatasetSplit> open_dataset_split(const ResolvedOptions& settled, const std::string& name) {
  return settled.episode_mode() ? open_episode_split(settled, name) : open_stream_split(settled, name);
}

OpenedSplits open_dataset_splits(ResolvedOptions& settled) {
  Config& c = settled.config;
  OpenedSplits splits;
  if (!settled.episode_mode()) {
    for (const char* name : kSplitNames) {
      if (std::string_view(name) == "train" || TokenStreamSplit::has_split(c.dataset_dir, name)) {
        splits.emplace(name, open_stream_split(settled, name));
      }
    }
    if (!c.token_dtype) c.token_dtype = splits.at("train")->data().stream->common_dtype();
    return splits;
  }
  std::error_code ec;
  for (const char* name : kSplitNames) {
    if (!std::filesystem::exists(c.dataset_dir / name, ec)) continue;
    const DatasetSplit& split = *splits.emplace(name, open_episode_split(settled, name)).first->second;
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

}  // namespace tokenfeed
