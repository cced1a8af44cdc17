#include "splits/stream_mode.hpp"

#include <utility>

#include "splits/shape_plan.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {
namespace {

// A mixture's source under the mixture's sequence-length schedule (random windows only,
// which Mixture checks): its train rows are drawn at each stage's length too, so `options`
// gains those lengths. Throws Error(format) for a length no file holds a window of.
void add_mixture_lengths(const ResolvedOptions& settled, const std::string& name, const TokenStreamSplit& stream,
                         TokenStreamBatchSource::Options& options) {
  for (const std::uint64_t length : settled.mixture_block_sizes) {
    const auto block = static_cast<std::size_t>(length);
    options.block_sizes.push_back(block);
    if (TokenStreamBatchSource::sample_count(stream, block, SamplingMode::random) == 0) {
      throw Error(ErrorKind::format, "split '" + name + "' of '" + settled.config.dataset_dir.string() + "' has " +
                                         std::to_string(stream.total_tokens()) +
                                         " tokens but no file holds one window of the mixture's shape_schedule "
                                         "block_size + 1 = " +
                                         std::to_string(block + 1) + " tokens");
    }
  }
}

}  // namespace

void StreamModeBuilder::add_order_fields(const Config& settled, OrderFields& fields) const {
  fields["block_size"] = std::to_string(settled.block_size);
}

TokenStreamBatchSource::Options StreamModeBuilder::source_options(const Config& settled,
                                                                  const ShapeSchedule* schedule) {
  TokenStreamBatchSource::Options options;
  options.block_size = static_cast<std::size_t>(settled.block_size);
  if (schedule != nullptr && schedule->changes_block_size()) {
    for (const ShapeSchedule::Stage& stage : schedule->stages()) {
      options.block_sizes.push_back(static_cast<std::size_t>(stage.block_size));
    }
  }
  options.mode = *settled.batch_sampling_mode;
  // Epoch windows under a sequence-length schedule: the epoch permutes units, the windows
  // of the longest stage length, and each stage cuts them into its rows.
  if (options.mode == SamplingMode::epoch && !options.block_sizes.empty()) {
    options.unit_tokens = static_cast<std::size_t>(schedule->largest_block_size()) + 1;
  }
  options.document_aware = settled.document_aware;
  if (settled.document_aware) options.eos_token_id = settled.eos_token_id;
  options.ignore_index = settled.ignore_index;
  options.contract_fields = settled.contract_fields;
  options.sequence_multiple = context_parallel_multiple(settled);
  options.pad_token_id = settled.pad_token_id.value_or(0);
  return options;
}

std::unique_ptr<DatasetSplit> StreamModeBuilder::open_split(const ResolvedOptions& settled,
                                                            const std::string& name) const {
  const Config& config = settled.config;
  auto data = std::make_unique<SplitData>();
  const TokenStreamSplit& stream = data->stream.emplace(TokenStreamSplit::open(
      config.dataset_dir, name, config.token_dtype, config.val_prefix, document_hash_split(config)));
  if (config.document_aware) {
    TokenStreamBatchSource::check_document_boundaries(stream, config.eos_token_id, "'" + settled.metadata_file() + "'");
  }
  EpisodeSampler::Settings settings = sampler_settings(config, name);
  const std::shared_ptr<const ShapeSchedule> schedule = settings.schedule;
  TokenStreamBatchSource::Options options = source_options(config, schedule.get());
  const SamplingMode sampling = *config.batch_sampling_mode;
  if (name == "train" && sampling == SamplingMode::random) add_mixture_lengths(settled, name, stream, options);
  // Epoch windows under a sequence-length schedule sample units (the windows of the
  // longest stage length; options.unit_tokens), else windows of block_size.
  const std::size_t block = options.unit_tokens > 0 ? options.unit_tokens - 1 : options.block_size;
  const std::uint64_t samples = TokenStreamBatchSource::sample_count(stream, block, sampling);
  settings.unit_tokens = options.unit_tokens;
  data->fingerprint = stream.fingerprint();
  // A sequence-length schedule over random windows: each stage draws from the window
  // starts of its length.
  std::string no_window;
  if (sampling == SamplingMode::random && schedule && schedule->changes_block_size()) {
    for (std::size_t i = 0; i < schedule->stages().size(); ++i) {
      const auto stage_block = static_cast<std::size_t>(schedule->stages()[i].block_size);
      settings.ids_per_stage.push_back(TokenStreamBatchSource::sample_count(stream, stage_block, sampling));
      if (settings.ids_per_stage.back() == 0 && no_window.empty()) {
        no_window = "split '" + name + "' of '" + config.dataset_dir.string() + "' has " +
                    std::to_string(stream.total_tokens()) +
                    " tokens but no file holds one window of shape_schedule stage " + std::to_string(i) +
                    "'s block_size + 1 = " + std::to_string(stage_block + 1) + " tokens";
      }
    }
  }
  data->sampler = std::make_unique<EpisodeSampler>(EpisodeSampler::IdRange{samples}, std::move(settings));
  data->orders = std::make_unique<EpochOrders>(*data->sampler);
  DatasetSplit::Description description{
      {"windows", "first_window_ids", "sampled_"},
      options.unit_tokens > 0 ? " units (windows of the longest block_size + 1)" : " windows of block_size + 1",
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
  if (samples == 0) {
    std::string window = "block_size + 1";
    if (options.unit_tokens > 0) {  // the longest stage's windows, the units
      std::size_t longest = 0;
      while (schedule->stages()[longest].block_size != block) ++longest;
      window = "shape_schedule stage " + std::to_string(longest) + "'s block_size + 1 (the longest, its epochs' units)";
    }
    no_window = "split '" + name + "' of '" + config.dataset_dir.string() + "' has " +
                std::to_string(stream.total_tokens()) + " tokens but no file holds one window of " + window + " = " +
                std::to_string(block + 1) + " tokens";
  }
  const std::size_t rows = largest_batch_rows(config, name);
  auto windows = std::make_unique<TokenStreamBatchSource>(stream, *data->orders, options);
  auto split = split_of_sampled_rows(name, config, std::move(data), std::move(windows),
                                     batch_shape_of(config, rows, false, largest_block_size(config, name)),
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

OpenedSplits StreamModeBuilder::open_splits(ResolvedOptions& settled) const {
  Config& c = settled.config;
  OpenedSplits splits;
  for (const char* name : kSplitNames) {
    if (std::string_view(name) == "train" ||
        TokenStreamSplit::has_split(c.dataset_dir, name, c.val_prefix, document_hash_split(c))) {
      splits.emplace(name, open_split(settled.for_split(name), name));
    }
  }
  if (!c.token_dtype) c.token_dtype = splits.at("train")->data().stream->common_dtype();
  return splits;
}

}  // namespace tokenfeed
