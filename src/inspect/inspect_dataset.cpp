// inspect_dataset: which splits the loader reads and how, each split's report, and what the
// verdicts add up to. The per-split checks are in their own units (split_reports.hpp).
#include "inspect/inspect_dataset.hpp"

#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "dataset/dataset_metadata.hpp"
#include "dataset/token_stream.hpp"
#include "inspect/split_reports.hpp"
#include "splits/resolved_options.hpp"
#include "util/filesystem_errors.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

enum class Layout { none, episodes, stream };

// How the loader would read `split` (detect_split_layout): an episode-indexed directory, a
// token stream, or absent. A directory that is neither is read as episodes, so that
// opening it names what is missing.
Layout layout_of(const fs::path& dataset_dir, const std::string& split) {
  if (const auto mode = detect_split_layout(dataset_dir, split)) {
    return *mode == DatasetMode::token_stream ? Layout::stream : Layout::episodes;
  }
  std::error_code ec;
  if (fs::is_directory(dataset_dir / split, ec)) return Layout::episodes;
  return Layout::none;
}

// The first .bin file the loader would open for a token-stream split that needs a dtype
// (a Megatron NAME.bin has its NAME.idx say it).
std::optional<fs::path> first_bin_file(const fs::path& dataset_dir, const std::string& split) {
  std::error_code ec;
  const auto untyped = [&ec](fs::path bin) { return !fs::exists(bin.replace_extension(".idx"), ec); };
  if (fs::is_regular_file(dataset_dir / (split + ".bin"), ec)) {
    if (!untyped(dataset_dir / (split + ".bin"))) return std::nullopt;
    return dataset_dir / (split + ".bin");
  }
  std::vector<fs::path> bins;
  for (const auto& entry : fs::directory_iterator(dataset_dir / split, ec)) {
    if (entry.is_regular_file(ec) && entry.path().extension() == ".bin" && untyped(entry.path())) {
      bins.push_back(entry.path());
    }
  }
  if (bins.empty()) return std::nullopt;
  return *std::min_element(bins.begin(), bins.end());
}

// Combinations that make no sense whatever the dataset: refused before reading it.
void check_request(const InspectRequest& r) {
  if (r.packed && r.block_size == 0) {
    throw Error(ErrorKind::usage, "inspect --packed needs --block-size T: packing fills rows of T positions");
  }
  if (r.context_parallel_size < 1 || r.context_parallel_size > (std::int64_t{1} << 20)) {
    throw Error(ErrorKind::usage,
                "inspect --context-parallel-size must be in [1, 2^20], got " + std::to_string(r.context_parallel_size));
  }
  if (!(r.val_fraction >= 0.0 && r.val_fraction < 1.0) || r.val_seed < 0) {
    throw Error(ErrorKind::usage, "inspect --val-fraction must be in [0, 1) and --val-seed >= 0 (got " +
                                      std::to_string(r.val_fraction) + ", " + std::to_string(r.val_seed) + ")");
  }
  if (r.context_parallel_size > 1 && !r.packed) {
    throw Error(ErrorKind::usage,
                "inspect --context-parallel-size describes the packing that --packed reports; add "
                "--packed --block-size T");
  }
  if (r.packed) {
    // The loader's own rule for the padded rows.
    Config c;
    c.dataset_mode = DatasetMode::sft_packed;
    c.block_size = r.block_size;
    c.context_parallel_size = r.context_parallel_size;
    try {
      check_context_parallel_rows(c);
    } catch (const Error& e) {
      throw Error(ErrorKind::usage, std::string("inspect --packed --context-parallel-size: ") + e.what());
    }
  }
}

// --packed over a token stream reads its files' documents as episodes, as sft_packed does:
// a stream with a file that does not index them (a plain .bin or .npy) has no episodes to
// pack. (A stream that does not open is left to its split's report.)
void check_packs_documents(const InspectRequest& r, std::optional<TokenDtype> dtype) {
  std::optional<TokenStreamSplit> train;
  try {
    train.emplace(TokenStreamSplit::open(r.dataset_dir, "train", dtype));
  } catch (const Error&) {
    return;
  }
  for (const StreamFile& f : train->files()) {
    if (f.document_starts) continue;
    throw Error(ErrorKind::usage,
                "inspect --packed reports how sft_packed packs episodes (of an episode-indexed "
                "dataset, or the documents of Megatron pairs and datatrove files), but '" +
                    r.dataset_dir + "' is a token stream whose file '" + f.map.path().string() +
                    "' does not index its documents");
  }
}

// Combinations that make no sense for this dataset: packing a token stream of unindexed
// files, cutting turns the metadata cannot find, a .bin stream whose dtype nothing says.
void check_request_against(const InspectRequest& r, const DatasetMetadata& meta, Layout mode,
                           std::optional<TokenDtype> dtype, const std::vector<std::string>& splits) {
  const fs::path root(r.dataset_dir);
  const std::string metadata_file = (root / "dataset_metadata.json").string();
  if (r.packed && mode == Layout::stream) check_packs_documents(r, dtype);
  if (r.packed && r.truncation == Truncation::drop_oldest_turns && !meta.special_tokens) {
    throw Error(ErrorKind::usage,
                "inspect --truncation drop_oldest_turns finds turns from the chat template's ids, but '" +
                    metadata_file + "' has no special_tokens (tokenfeed prepare records them)");
  }
  if (mode == Layout::stream && !dtype) {
    for (const std::string& name : splits) {
      if (const auto bin = first_bin_file(root, name)) {
        throw Error(ErrorKind::usage, "'" + bin->string() + "': a .bin token file does not record its dtype, and " +
                                          (meta.present ? "'" + metadata_file + "' has no token_dtype"
                                                        : "the dataset has no dataset_metadata.json") +
                                          "; pass --token-dtype uint16 or uint32");
      }
    }
  }
}

// The error the report adds up to: the first refusal, else the deep checks' failures.
std::optional<Refusal> failure_of(const DatasetReport& report) {
  const auto any = [&](bool SplitReport::*flag) {
    return std::any_of(report.splits.begin(), report.splits.end(), [&](const SplitReport& s) { return s.*flag; });
  };
  for (const SplitReport& split : report.splits) {
    if (split.refusal) return split.refusal;
  }
  const std::string dataset = "dataset '" + report.dataset_dir + "' ";
  if (report.missing_train) return Refusal{ErrorKind::io, dataset + "has " + *report.missing_train};
  if (any(&SplitReport::bad_token_ids))
    return Refusal{ErrorKind::format, dataset + "holds token ids outside the vocabulary"};
  if (any(&SplitReport::bad_checksums)) {
    return Refusal{ErrorKind::format, dataset + "does not match the content checksums in its dataset_metadata.json"};
  }
  if (any(&SplitReport::bad_mask_values)) return Refusal{ErrorKind::format, dataset + "holds mask values out of range"};
  return std::nullopt;
}

}  // namespace

const char* to_string(DtypeSource source) noexcept {
  switch (source) {
    case DtypeSource::metadata:
      return "dataset_metadata.json";
    case DtypeSource::given:
      return "given";
    case DtypeSource::inferred:
      return "inferred";
    case DtypeSource::npy_header:
      return "npy_header";
    case DtypeSource::megatron_index:
      return "megatron_index";
    case DtypeSource::datatrove_metadata:
      return "datatrove_metadata";
  }
  return "?";
}

ResolvedOptions assumed_run(const InspectRequest& r, const DatasetMetadata& meta, std::optional<TokenDtype> dtype) {
  ResolvedOptions run;
  run.metadata = meta;
  Config& c = run.config;
  c.dataset_dir = r.dataset_dir;
  c.token_dtype = dtype;
  c.mask_dtype = meta.mask_dtype;
  c.dataset_mode = r.packed ? DatasetMode::sft_packed : DatasetMode::auto_detect;
  c.batch_sampling_mode = SamplingMode::epoch;
  c.batch_size = 1;
  c.block_size = r.block_size;
  c.rank = 0;
  c.world_size = 1;
  c.epoch_drop_last = false;
  c.truncation = r.truncation;
  c.pack_lookahead = r.pack_lookahead;
  c.epoch_seed = r.seed;
  c.context_parallel_size = r.context_parallel_size;
  c.val_fraction = r.val_fraction;
  c.val_seed = r.val_seed;
  return run;
}

namespace {

// inspect_dataset itself; its caller turns a filesystem error under it into tokenfeed's.
DatasetReport inspect_dataset_directly(const InspectRequest& r) {
  check_request(r);
  const fs::path root(r.dataset_dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    throw Error(ErrorKind::io, "dataset directory '" + r.dataset_dir + "' does not exist");
  }
  const DatasetMetadata meta = read_dataset_metadata(root);
  // The token dtype as the loader takes it: the metadata's, else the one given (which must
  // not contradict the metadata), else inferred (episodes) or read from .npy headers.
  const std::optional<TokenDtype> dtype =
      settle_dtype(r.token_dtype, meta.token_dtype, GivenSetting{"--token-dtype", ErrorKind::usage, "drop the option"},
                   (root / "dataset_metadata.json").string());
  const ResolvedOptions run = assumed_run(r, meta, dtype);

  // Which splits the loader reads, and how: the layout of train decides (as dataset_mode's
  // auto-detection does), and val is read in the same layout when it has one. Without a
  // train split, val is still described, but the dataset cannot be loaded.
  const Layout train = layout_of(root, "train");
  const Layout mode = train != Layout::none ? train : layout_of(root, "val");
  if (mode == Layout::none) {
    throw Error(ErrorKind::io, "dataset directory '" + r.dataset_dir +
                                   "' has no train or val split (episode-indexed train/, or train.bin / train/*.bin / "
                                   "train/*.npy)");
  }
  std::vector<std::string> splits;
  if (train != Layout::none) splits.push_back("train");
  const DocumentHashSplit by_hash{r.val_fraction, static_cast<std::uint64_t>(r.val_seed)};
  const bool val =
      mode == Layout::episodes ? fs::exists(root / "val", ec) : TokenStreamSplit::has_split(root, "val", {}, by_hash);
  if (val) splits.push_back("val");
  check_request_against(r, meta, mode, dtype, splits);

  DatasetReport report;
  report.dataset_dir = r.dataset_dir;
  report.metadata_present = meta.present;
  // With --packed, a token stream's splits are reported as the episodes sft_packed reads.
  report.layout = mode == Layout::episodes || r.packed ? DatasetLayout::episodes : DatasetLayout::token_stream;
  report.deep = r.deep;
  report.block_size = r.block_size;
  for (const std::string& name : splits) {
    // --packed over a token stream: its files' documents as episodes, as sft_packed reads them.
    report.splits.push_back(mode == Layout::episodes || r.packed ? inspect_episode_split(r, run, name)
                                                                 : inspect_stream_split(r, meta, dtype, name));
  }
  if (mode == Layout::episodes && !val && TokenStreamSplit::has_split(root, "val")) {
    report.val_ignored = "val.bin is a token stream; an episode-indexed dataset reads val/ only";
  }
  if (mode == Layout::stream && !val && fs::exists(root / "val", ec)) {
    report.val_ignored = "val/ holds no *.bin or *.npy token files";
  }
  if (train == Layout::none) {
    report.missing_train = "no train split: the loader needs " +
                           std::string(mode == Layout::episodes ? "train/" : "train.bin or train/ with *.bin / *.npy");
  }
  report.failure = failure_of(report);
  // A snippet for a dataset the loader refuses would only fail later; one whose deep
  // checks fail still loads.
  const bool refused = report.missing_train || std::any_of(report.splits.begin(), report.splits.end(),
                                                           [](const SplitReport& s) { return s.refusal.has_value(); });
  if (!refused) report.suggested_config = suggest_config(r, run, report);
  return report;
}

}  // namespace

DatasetReport inspect_dataset(const InspectRequest& r) {
  return filesystem_errors_as_io([&] { return inspect_dataset_directly(r); });
}

}  // namespace tokenfeed
