// The <training> config inspect suggests for a dataset the loader accepts: the dataset's
// mode, a batch and block size that train (and every token-stream split) can fill, the
// pad id and end-of-text settings the loader needs, and a dtype the dataset does not record.
#include <filesystem>
#include <string>
#include <vector>

#include "util/shortest_text.hpp"
#include "inspect/split_reports.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

constexpr std::int64_t kSnippetBatchSize = 8;     // batch_size in the snippet
constexpr std::int64_t kSnippetBlockSize = 1024;  // block_size in the snippet when none is given

// The block size of a token-stream snippet without one given: the largest power of two up
// to 1024 that gives every split a batch's worth of whole (non-overlapping) windows, one
// per row, so that epoch sampling forms a batch too; else the largest that leaves every
// split one window start (enough for random sampling); 0 when not even block 1 fits.
std::int64_t stream_block_size(const DatasetReport& report, std::string& why) {
  const auto fits = [&](std::uint64_t block, bool per_batch) {
    for (const SplitReport& split : report.splits) {
      std::uint64_t windows = 0, starts = 0;
      for (const StreamFileFigures& file : split.stream->files) {
        windows += file.tokens / (block + 1);
        starts += file.tokens > block ? file.tokens - block : 0;
      }
      if (per_batch ? windows < static_cast<std::uint64_t>(kSnippetBatchSize) : starts == 0) return false;
    }
    return true;
  };
  for (const bool per_batch : {true, false}) {
    for (std::int64_t block = kSnippetBlockSize; block >= 1; block /= 2) {
      if (!fits(static_cast<std::uint64_t>(block), per_batch)) continue;
      if (block == kSnippetBlockSize && per_batch) {
        why = "assumed, no --block-size given";
      } else {
        why = "chosen, no --block-size given: the largest power of two up to " + std::to_string(kSnippetBlockSize) +
              (per_batch
                   ? " with " + std::to_string(kSnippetBatchSize) + " whole windows (one per batch row) in every split"
                   : " with one window in every split (too short for a batch of whole windows)");
      }
      return block;
    }
  }
  return 0;
}

const SplitReport* train_of(const DatasetReport& report) {
  for (const SplitReport& split : report.splits) {
    if (split.name == "train") return &split;
  }
  return nullptr;
}

// Episodes: the sampling, the mask, the pad id and (packed) the packing settings.
void episode_keys(const InspectRequest& r, const ResolvedOptions& run, const DatasetReport& report,
                  std::vector<SuggestedKey>& keys) {
  keys.push_back({"batch_sampling_mode", "epoch", ""});
  bool mask = false;
  for (const SplitReport& split : report.splits) mask = mask || split.episodes->mask.has_value();
  // auto (the default) is what the loader does: on when every shard has mask.bin.
  keys.push_back({"use_loss_mask", "auto",
                  mask ? "on: the dataset has mask.bin" : "off: no mask.bin, every position is trained on"});
  // The loader's pad id: the metadata's pad_token_id, eot_token_id, eos_token_id; with
  // none of them, the loader needs one in the config.
  if (!pad_from_metadata(run.config, run.metadata)) {
    keys.push_back({"pad_token_id", "0", "set: no eot_token_id in the metadata"});
  }
  if (r.packed) {
    // The settings the packing efficiency was measured with.
    keys.push_back({"truncation", to_string(r.truncation), ""});
    keys.push_back({"pack_lookahead", std::to_string(r.pack_lookahead), ""});
    keys.push_back({"epoch_seed", std::to_string(r.seed), ""});
  }
}

// The token dtype when the dataset does not record it: inferred from (or given for)
// episode files, or given for .bin stream files (.npy files carry their own).
std::optional<TokenDtype> unrecorded_dtype(const DatasetReport& report) {
  std::optional<TokenDtype> dtype;
  for (const SplitReport& split : report.splits) {
    if (split.episodes) dtype = split.episodes->dtype;
    if (!split.stream) continue;
    for (const StreamFileFigures& file : split.stream->files) {
      if (file.dtype_source == DtypeSource::given) dtype = file.dtype;
    }
  }
  return dtype;
}

// Whether every token file of every split indexes its documents (a Megatron .idx, a
// datatrove .ds.index): document_aware then needs no end-of-text id.
bool every_file_indexed(const DatasetReport& report) {
  bool any = false;
  for (const SplitReport& split : report.splits) {
    if (!split.stream) return false;
    for (const StreamFileFigures& file : split.stream->files) {
      if (!file.documents || file.docs_file.ends_with(".docs.npy")) return false;
      any = true;
    }
  }
  return any;
}

}  // namespace

std::vector<SuggestedKey> suggest_config(const InspectRequest& r, const ResolvedOptions& run,
                                         const DatasetReport& report) {
  const bool episodes = report.layout == DatasetLayout::episodes;
  std::int64_t block = r.block_size;
  std::string block_note;
  if (block == 0 && episodes) {
    block = kSnippetBlockSize;
    block_note = "assumed, no --block-size given: longer episodes are truncated (see inspect --block-size)";
  } else if (block == 0) {
    block = stream_block_size(report, block_note);
  }
  // Epoch sampling with epoch_drop_last needs one whole batch in train.
  std::int64_t batch = kSnippetBatchSize;
  std::string batch_note;
  const SplitReport* train = train_of(report);
  const std::uint64_t units = !episodes  ? 0
                              : r.packed ? train->episodes->block->packing->packed_rows
                                         : train->episodes->kept;
  if (episodes && units < static_cast<std::uint64_t>(batch)) {
    batch = static_cast<std::int64_t>(units);
    batch_note = "train has only " + std::to_string(units) + (r.packed ? " packed rows" : " kept episodes");
  }
  std::vector<SuggestedKey> keys;
  keys.push_back({"dataset_dir", fs::absolute(r.dataset_dir).lexically_normal().string(), ""});
  keys.push_back({"dataset_mode", !episodes ? "token_stream" : r.packed ? "sft_packed" : "sft_episode", ""});
  keys.push_back({"batch_size", std::to_string(batch), batch_note});
  keys.push_back({"block_size", std::to_string(block), block_note});
  if (episodes) {
    episode_keys(r, run, report, keys);
  } else {
    keys.push_back({"batch_sampling_mode", "random", ""});
    const bool documents = end_of_text_id(r.eos_id, run.metadata) || every_file_indexed(report);
    keys.push_back({"document_aware", documents ? "true" : "false", ""});
    if (r.eos_id) keys.push_back({"eos_token_id", std::to_string(*r.eos_id), ""});
  }
  const std::optional<TokenDtype> unrecorded = run.metadata.token_dtype ? std::nullopt : unrecorded_dtype(report);
  if (unrecorded) keys.push_back({"token_dtype", to_string(*unrecorded), ""});
  if (r.val_fraction > 0.0) {
    keys.push_back({"val_fraction", shortest_text(r.val_fraction), ""});
    keys.push_back({"val_seed", std::to_string(r.val_seed), ""});
  }
  return keys;
}

}  // namespace tokenfeed
