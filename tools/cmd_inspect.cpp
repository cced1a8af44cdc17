// `tokenfeed inspect`: describes and validates a dataset directory, split by split.
//
// The verdicts follow the loader: a split the loader would refuse (a file it cannot open or
// validate, no episode left after filtering, no window at the given block size), or a
// dataset without train, is INVALID and the command exits with the status the loader's
// error would give. --deep adds checks the loader does not make (token ids against
// vocab_size, uint8 mask values other than 0 and 1, negative float32 weights, the shards'
// content against the SHA-256 recorded in dataset_metadata.json), whose failure is also
// INVALID.
#include <algorithm>
#include <map>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "dataset/content_checksum.hpp"
#include "dataset/dataset_metadata.hpp"
#include "dataset/mask_values.hpp"
#include "dataset/episode_dataset.hpp"
#include "util/id_list.hpp"
#include "sampling/episode_packer.hpp"
#include "sampling/episode_sampler.hpp"
#include "measure/nearest_rank.hpp"
#include "modes/episode_window.hpp"
#include "modes/packed_batch_source.hpp"
#include "dataset/token_stream.hpp"
#include "loader/resolved_options.hpp"
#include "modes/token_stream_batch_source.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed::cli {
namespace {

namespace fs = std::filesystem;

constexpr long kSnippetBatchSize = 8;           // batch_size in the --print-config snippet
constexpr long kSnippetBlockSize = 1024;        // block_size in the snippet when --block-size is absent
constexpr std::size_t kListedIds = 8;           // episode ids listed by --deep

struct InspectOptions {
  std::string dataset_dir;
  std::string config;  // --config: a mixture's config, inspected over --steps
  long steps = 1000;
  long block_size = 0;
  bool deep = false;
  long eos_id = -1;  // overrides the metadata's end-of-text id for token streams
  bool print_config = false;
  std::string token_dtype;  // empty: not given
  // --packed: how a run with dataset_mode=sft_packed and these settings packs epoch 0.
  bool packed = false;
  long pack_lookahead = 64;
  Truncation truncation = Truncation::right;
  long seed = 1337;
  bool packing_option_given = false;  // --pack-lookahead, --truncation or --seed (they need --packed)
};

enum class Layout { none, episodes, stream };

// The first reason the loader would refuse the dataset: its error kind and message.
struct Refusal {
  ErrorKind kind = ErrorKind::format;
  std::string message;
};

// What the splits showed: the verdict, and what --print-config needs.
struct Findings {
  std::optional<Refusal> refused;
  bool bad_token_ids = false;                    // --deep: ids >= vocab_size
  bool bad_mask_values = false;                  // --deep: uint8 not 0/1, float32 negative
  bool bad_checksums = false;                    // --deep: content differs from the recorded sha256
  bool mask = false;
  std::optional<TokenDtype> dtype;                // episodes: the split's token dtype
  std::optional<TokenDtype> bin_dtype;            // streams: the --token-dtype their .bin files were read with
  std::uint64_t train_kept = 0;                   // episodes: kept episodes of train
  std::uint64_t train_packed_rows = 0;            // --packed: rows of train's epoch 0
  std::vector<std::vector<std::uint64_t>> stream_files;  // token counts of each stream split's files

  void refuse(ErrorKind kind, std::string message) {
    if (!refused) refused = Refusal{kind, std::move(message)};
  }
};

std::string percent(std::uint64_t part, std::uint64_t whole) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f%%", whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return text;
}

// --eos-id, when given.
std::optional<std::int64_t> given_eos(const InspectOptions& o) {
  return o.eos_id >= 0 ? std::optional<std::int64_t>(o.eos_id) : std::nullopt;
}

std::string id_list(const std::vector<std::uint64_t>& ids, std::uint64_t total) {
  std::string text;
  for (const std::uint64_t id : ids) text += (text.empty() ? "" : ", ") + std::to_string(id);
  if (total > ids.size()) text += ", ...";
  return text;
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      default: out += c;
    }
  }
  return out;
}

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

// The run inspect describes: the loader's defaults, with the options inspect takes over
// them (--block-size; --packed with --truncation, --seed and --pack-lookahead), each
// epoch's rows in full (epoch_drop_last=false) and one rank, reading the token dtype
// settled from the metadata and --token-dtype (the mask dtype is the metadata's: no option
// gives one). Its split options and per-split builders are the loader's own, so a split
// opens as the loader opens it and --packed packs as a run with these settings does.
ResolvedOptions assumed_run(const InspectOptions& o, const DatasetMetadata& meta, std::optional<TokenDtype> dtype) {
  ResolvedOptions run;
  run.metadata = meta;
  Config& c = run.config;
  c.dataset_dir = o.dataset_dir;
  c.token_dtype = dtype;
  c.mask_dtype = meta.mask_dtype;
  c.dataset_mode = o.packed ? DatasetMode::sft_packed : DatasetMode::auto_detect;
  c.batch_sampling_mode = SamplingMode::epoch;
  c.batch_size = 1;
  c.block_size = o.block_size;
  c.rank = 0;
  c.world_size = 1;
  c.epoch_drop_last = false;
  c.truncation = o.truncation;
  c.pack_lookahead = o.pack_lookahead;
  c.epoch_seed = o.seed;
  return run;
}

// The first .bin file the loader would open for a token-stream split (it needs a dtype).
std::optional<fs::path> first_bin_file(const fs::path& dataset_dir, const std::string& split) {
  std::error_code ec;
  if (fs::is_regular_file(dataset_dir / (split + ".bin"), ec)) return dataset_dir / (split + ".bin");
  std::vector<fs::path> bins;
  for (const auto& entry : fs::directory_iterator(dataset_dir / split, ec)) {
    if (entry.is_regular_file(ec) && entry.path().extension() == ".bin") bins.push_back(entry.path());
  }
  if (bins.empty()) return std::nullopt;
  return *std::min_element(bins.begin(), bins.end());
}

// Trained (mask != 0) label positions of an episode's kept sequence: mask[1:] of it.
std::uint64_t trained_positions(const EpisodeWindows& windows, std::uint64_t episode, const SftWindow& window,
                                std::vector<float>& scratch) {
  if (window.size() < 2) return 0;
  scratch.resize(window.size() - 1);
  windows.read_mask(episode, window, 1, scratch.size(), scratch.data());
  return static_cast<std::uint64_t>(std::count_if(scratch.begin(), scratch.end(), [](float v) { return v != 0.0f; }));
}

// With --packed: what a run with dataset_mode=sft_packed and the options' truncation,
// epoch_seed and pack_lookahead packs in epoch 0, through the loader's own classes (the
// same kept windows, numpy-compatible order and packer), against one episode per row.
void report_packing(const InspectOptions& o, const ResolvedOptions& run, const std::string& name,
                    const EpisodeSplit& split, const IdList& kept, Findings& found) {
  const auto T = static_cast<std::size_t>(o.block_size);
  const std::unique_ptr<EpisodeWindows> windows = run.episode_windows(split);
  const std::unique_ptr<EpisodeSampler> sampler = run.episode_sampler(split, kept, run.packed_order_settings(name));
  const EpochOrders orders(*sampler);
  const PackedBatchSource source(split, *windows, orders, run.packing_options(name, false));
  const std::shared_ptr<const PackedEpoch> packed = source.packing(0);
  // Padded sft_episode rows hold the same positions, one row per sampled id (a kept episode,
  // or with truncation=split a piece): its kept length - 1.
  std::uint64_t positions = 0;
  for (std::uint64_t i = 0; i < sampler->size(); ++i) {
    positions += windows->kept(sampler->id_at(i), sampler->pieces()).window.size() - 1;
  }
  const std::uint64_t packed_cells = packed->rows() * T, padded_cells = sampler->size() * T;
  std::printf(
      "  packing      sft_packed: %llu rows, %llu of %llu positions real (%s); sft_episode: %llu rows, %llu of "
      "%llu positions real (%s)\n",
      static_cast<unsigned long long>(packed->rows()), static_cast<unsigned long long>(packed->positions),
      static_cast<unsigned long long>(packed_cells), percent(packed->positions, packed_cells).c_str(),
      static_cast<unsigned long long>(sampler->size()), static_cast<unsigned long long>(positions),
      static_cast<unsigned long long>(padded_cells), percent(positions, padded_cells).c_str());
  if (const DocumentPieces* pieces = sampler->pieces()) {
    // What split costs: the documents it cuts, and the padding left in the packed rows.
    const std::uint64_t documents = kept.size();
    std::uint64_t cut = 0;
    for (std::uint64_t k = 0; k < documents; ++k) {
      if (pieces->pieces_in(k) > 1) ++cut;
    }
    std::printf(
        "  split        %llu of %llu documents cut (%s) into %llu pieces; padding %llu of %llu packed positions "
        "(%s)\n",
        static_cast<unsigned long long>(cut), static_cast<unsigned long long>(documents),
        percent(cut, documents).c_str(), static_cast<unsigned long long>(pieces->size()),
        static_cast<unsigned long long>(packed_cells - packed->positions),
        static_cast<unsigned long long>(packed_cells), percent(packed_cells - packed->positions, packed_cells).c_str());
  }
  std::printf(
      "  packing      assumed: truncation=%s, epoch_seed=%ld (epoch 0's order), pack_lookahead=%ld, "
      "episode_min_tokens=%llu; every row of the epoch (epoch_drop_last may leave the last rows out of a run)\n",
      to_string(o.truncation), o.seed, o.pack_lookahead,
      static_cast<unsigned long long>(run.config.episode_min_tokens));
  if (name == "train") found.train_packed_rows = packed->rows();
}

// With --block-size T: what each truncation rule cuts, and (--packed) how full packed rows
// are against padded ones.
void report_truncation_and_packing(const InspectOptions& o, const ResolvedOptions& run, const std::string& name,
                                   const EpisodeSplit& split, const IdList& kept, Findings& found) {
  const DatasetMetadata& meta = run.metadata;
  const auto S = static_cast<std::size_t>(o.block_size) + 1;
  std::vector<float> scratch;
  std::uint64_t truncated = 0;
  for (const std::uint64_t e : kept) {
    if (split.spans()[e].length > S) ++truncated;
  }
  std::printf("  block %-6ld %llu episodes longer than block_size + 1 (%.2f%%)\n", o.block_size,
              static_cast<unsigned long long>(truncated),
              kept.empty() ? 0.0 : 100.0 * static_cast<double>(truncated) / static_cast<double>(kept.size()));
  std::vector<Truncation> rules = {Truncation::right};
  if (meta.special_tokens) rules.push_back(Truncation::drop_oldest_turns);
  for (const Truncation rule : rules) {
    const EpisodeWindows windows(split, S, rule, meta.special_tokens);
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
    std::printf("  truncation   %-17s %llu tokens dropped, %s trained tokens lost\n", to_string(rule),
                static_cast<unsigned long long>(dropped_tokens),
                split.has_mask() ? std::to_string(lost_trained).c_str() : "n/a (no mask)");
  }
  if (!meta.special_tokens) {
    std::printf("  truncation   drop_oldest_turns n/a: dataset_metadata.json has no special_tokens\n");
  }
  if (o.packed) report_packing(o, run, name, split, kept, found);
}

// --deep: mask values no mask should hold, with the first offender located: uint8 values
// other than 0 and 1 (the loader trains them as 1), float32 negative weights. (NaN and
// infinite weights already made the split INVALID: the loader refuses them.)
void deep_check_mask_values(const EpisodeSplit& split, Findings& found) {
  const MaskDtype dtype = *split.mask_dtype();
  std::uint64_t total = 0;
  std::string first;
  for (std::size_t s = 0; s < split.shards().size(); ++s) {
    const EpisodeShard& shard = split.shards()[s];
    const MaskValueScan scan = scan_mask_values(shard.mask.bytes(), dtype);
    const MaskValueCount& bad = dtype == MaskDtype::uint8 ? scan.not_binary : scan.negative;
    total += bad.count;
    if (bad.count != 0 && first.empty()) {
      char value[32];
      std::snprintf(value, sizeof value, "%g", static_cast<double>(bad.first_value));
      first = std::string(" (first: ") + value + " at value offset " + std::to_string(bad.first_offset) + " of '" +
              (shard.dir / "mask.bin").string() + "'" + split.locate(s, bad.first_offset) + ")";
    }
  }
  std::printf("  deep         %llu mask values %s%s\n", static_cast<unsigned long long>(total),
              dtype == MaskDtype::uint8 ? "outside {0, 1} (read as 1)" : "negative", first.c_str());
  found.bad_mask_values = found.bad_mask_values || total > 0;
}

// --deep: `actual` (each shard's key, relative to the dataset directory, with its files'
// SHA-256) against what dataset_metadata.json records for split `name`.
void compare_checksums(const DatasetMetadata& meta, const std::string& name,
                       const std::map<std::string, ShardChecksums>& actual, Findings& found) {
  std::size_t recorded = 0;
  for (const auto& [shard, files] : meta.content_sha256) recorded += shard == name || shard.starts_with(name + "/");
  if (recorded == 0) {
    std::printf("  deep         content checksums not recorded in dataset_metadata.json\n");
    return;
  }
  std::vector<std::string> problems;
  for (const auto& [key, files] : actual) {
    const auto it = meta.content_sha256.find(key);
    if (it == meta.content_sha256.end()) {
      problems.push_back(key + " has no recorded checksum");
      continue;
    }
    for (const auto& [file, hex] : it->second) {
      const auto got = files.find(file);
      if (got == files.end()) {
        problems.push_back(key + "/" + file + " is missing");
      } else if (got->second != hex) {
        problems.push_back(key + "/" + file + " differs (sha256 " + got->second.substr(0, 16) + "..., recorded " +
                           hex.substr(0, 16) + "...)");
      }
    }
    for (const auto& [file, hex] : files) {
      if (it->second.count(file) == 0) problems.push_back(key + "/" + file + " has no recorded checksum");
    }
  }
  for (const auto& [shard, files] : meta.content_sha256) {
    if ((shard == name || shard.starts_with(name + "/")) && actual.count(shard) == 0) {
      problems.push_back(shard + " is recorded but missing");
    }
  }
  if (problems.empty()) {
    std::printf("  deep         content checksums ok (%zu shard%s, sha256)\n", actual.size(),
                actual.size() == 1 ? "" : "s");
    return;
  }
  std::printf("  deep         content checksums: %zu mismatch%s: %s%s\n", problems.size(),
              problems.size() == 1 ? "" : "es", problems.front().c_str(), problems.size() > 1 ? ", ..." : "");
  found.bad_checksums = true;
}

// --deep: each shard's files against the SHA-256 recorded in dataset_metadata.json.
void deep_check_checksums(const fs::path& root, const DatasetMetadata& meta, const std::string& name,
                          const EpisodeSplit& split, Findings& found) {
  std::map<std::string, ShardChecksums> actual;
  for (const EpisodeShard& shard : split.shards()) {
    actual[shard.dir.lexically_relative(root).generic_string()] = checksum_shard(shard.dir);
  }
  compare_checksums(meta, name, actual, found);
}

// --deep on a sharded token stream: its files (shards and their .docs.npy), recorded under
// the split's name as prepare-text records them.
void deep_check_stream_checksums(const fs::path& root, const DatasetMetadata& meta, const std::string& name,
                                 Findings& found) {
  const fs::path dir = root / name;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return;  // a flat <split>.bin|.npy: nothing records it
  compare_checksums(meta, name, {{name, checksum_stream_split(dir)}}, found);
}

// --deep on an episode split: token ids against vocab_size (the first offender located by
// file, offset and episode), and kept episodes with nothing to train on: an all-zero mask
// over their label positions mask[1:n] (mask[0] aligns with no label).
void deep_check_episodes(const DatasetMetadata& meta, const EpisodeSplit& split, const IdList& kept, Findings& found) {
  if (meta.vocab_size) {
    const auto vocab = static_cast<std::uint64_t>(*meta.vocab_size);
    std::uint64_t out_of_vocab = 0;
    std::optional<std::pair<std::size_t, std::uint64_t>> first;  // (shard, token offset)
    for (std::size_t s = 0; s < split.shards().size(); ++s) {
      for (std::uint64_t i = 0; i < split.shards()[s].token_count; ++i) {
        if (split.token_at(s, i) < vocab) continue;
        ++out_of_vocab;
        if (!first) first.emplace(s, i);
      }
    }
    std::string where;
    if (first) {
      const auto [s, offset] = *first;
      const EpisodeShard& shard = split.shards()[s];
      where = " (first: token " + std::to_string(split.token_at(s, offset)) + " at token offset " +
              std::to_string(offset) + " of '" + (shard.dir / "tokens.bin").string() + "'";
      for (std::uint64_t e = shard.first_episode; e < shard.first_episode + shard.episodes; ++e) {
        const EpisodeSpan span = split.spans()[e];
        if (offset >= span.start && offset - span.start < span.length) {
          where += ", episode " + std::to_string(e) + " position " + std::to_string(offset - span.start);
          break;
        }
      }
      where += ")";
    }
    std::printf("  deep         %llu tokens >= vocab_size %lld%s\n", static_cast<unsigned long long>(out_of_vocab),
                static_cast<long long>(*meta.vocab_size), where.c_str());
    found.bad_token_ids = found.bad_token_ids || out_of_vocab > 0;
  } else {
    std::printf("  deep         token ids not checked: dataset_metadata.json has no vocab_size\n");
  }
  if (!split.has_mask()) return;
  deep_check_mask_values(split, found);
  std::vector<float> mask;
  std::vector<std::uint64_t> listed;
  std::uint64_t all_zero = 0;
  for (const std::uint64_t e : kept) {
    mask.resize(static_cast<std::size_t>(split.spans()[e].length - 1));
    split.read_mask(e, 1, mask.size(), mask.data());
    if (std::any_of(mask.begin(), mask.end(), [](float v) { return v != 0.0f; })) continue;
    ++all_zero;
    if (listed.size() < kListedIds) listed.push_back(e);
  }
  std::printf("  deep         %llu of %zu kept episodes with an all-zero mask on their labels, mask[1:n] (nothing to "
              "train on)%s\n",
              static_cast<unsigned long long>(all_zero), kept.size(),
              all_zero > 0 ? (": episode ids " + id_list(listed, all_zero)).c_str() : "");
}

void inspect_split(const InspectOptions& o, const ResolvedOptions& run, const std::string& name, Findings& found) {
  const DatasetMetadata& meta = run.metadata;
  const std::optional<TokenDtype> dtype = run.config.token_dtype;
  const auto min_tokens = static_cast<std::uint64_t>(run.config.episode_min_tokens);
  const fs::path dir = fs::path(o.dataset_dir) / name;
  std::printf("split %s (%s)\n", name.c_str(), dir.c_str());
  std::optional<EpisodeSplit> opened;
  try {
    opened.emplace(EpisodeSplit::open(dir, run.episode_split_options()));
  } catch (const Error& e) {
    std::printf("  verdict      INVALID: %s\n", e.what());
    found.refuse(e.kind(), e.what());
    return;
  }
  const EpisodeSplit& split = *opened;
  const IdList kept = kept_episodes(split, min_tokens);
  found.mask = found.mask || split.has_mask();
  found.dtype = split.token_dtype();
  if (name == "train") found.train_kept = kept.size();
  const bool flat = split.shards().size() == 1 && split.shards().front().dir == dir;
  std::printf("  layout       %s, %zu shard%s\n", flat ? "flat (files directly in the split)" : "sharded",
              split.shards().size(), split.shards().size() == 1 ? "" : "s");
  std::printf("  episodes     %llu (%zu with >= %llu tokens)\n", static_cast<unsigned long long>(split.num_episodes()),
              kept.size(), static_cast<unsigned long long>(min_tokens));
  std::printf("  tokens       %llu, dtype %s%s\n", static_cast<unsigned long long>(split.total_tokens()),
              to_string(split.token_dtype()),
              meta.token_dtype ? " (from dataset_metadata.json)" : dtype ? " (from --token-dtype)" : " (inferred)");
  std::printf("  mask         %s\n", split.has_mask() ? to_string(*split.mask_dtype()) : "absent");

  std::vector<std::uint64_t> lengths;
  lengths.reserve(split.num_episodes());
  for (std::uint64_t e = 0; e < split.num_episodes(); ++e) lengths.push_back(split.spans()[e].length);
  std::sort(lengths.begin(), lengths.end());
  if (!lengths.empty()) {
    std::printf("  lengths      min %llu, median %llu, p90 %llu, p99 %llu, max %llu\n",
                static_cast<unsigned long long>(lengths.front()), static_cast<unsigned long long>(nearest_rank(lengths, 0.5)),
                static_cast<unsigned long long>(nearest_rank(lengths, 0.9)),
                static_cast<unsigned long long>(nearest_rank(lengths, 0.99)),
                static_cast<unsigned long long>(lengths.back()));
  }
  if (kept.empty()) {
    // The loader refuses a split it can sample nothing from, whatever the config.
    const std::string why = "no episode left after filtering: none of its " + std::to_string(split.num_episodes()) +
                            " episodes has >= " + std::to_string(min_tokens) +
                            " tokens (episode_min_tokens is at least 2)";
    std::printf("  verdict      INVALID: %s\n", why.c_str());
    found.refuse(ErrorKind::format, "split '" + dir.string() + "' has " + why);
    return;
  }
  if (o.block_size > 0) report_truncation_and_packing(o, run, name, split, kept, found);
  const bool bad_before = found.bad_token_ids;
  const bool bad_mask_before = found.bad_mask_values;
  const bool bad_sums_before = found.bad_checksums;
  if (o.deep) {
    deep_check_episodes(meta, split, kept, found);
    deep_check_checksums(fs::path(o.dataset_dir), meta, name, split, found);
  }
  std::printf("  verdict      %s\n", found.bad_token_ids && !bad_before ? "INVALID: token ids out of vocabulary"
                                     : found.bad_mask_values && !bad_mask_before ? "INVALID: mask values out of range"
                                     : found.bad_checksums && !bad_sums_before   ? "INVALID: content checksum mismatch"
                                                                                 : "ok");
}

// A token stream's files: their layout, sizes and dtypes (and where each dtype came from).
void describe_stream_files(const DatasetMetadata& meta, const std::string& name, const TokenStreamSplit& split,
                           Findings& found) {
  std::vector<std::uint64_t> file_tokens;
  for (const StreamFile& f : split.files()) {
    file_tokens.push_back(f.tokens);
    if (f.map.path().extension() == ".bin" && !meta.token_dtype) found.bin_dtype = f.dtype;
  }
  found.stream_files.push_back(file_tokens);
  std::printf("  layout       %s, %zu file%s\n", split.flat() ? ("flat (" + name + ".bin)").c_str() : "sharded",
              split.files().size(), split.files().size() == 1 ? "" : "s");
  std::uint64_t documents = 0, with_docs = 0;
  for (const StreamFile& f : split.files()) {
    const bool bin = f.map.path().extension() == ".bin";
    const std::string docs =
        f.documents ? ", " + std::to_string(*f.documents) + " documents (" + f.map.path().stem().string() + ".docs.npy)"
                    : std::string();
    std::printf("  file         %s: %llu tokens, %s%s%s\n", f.map.path().filename().c_str(),
                static_cast<unsigned long long>(f.tokens), to_string(f.dtype),
                !bin               ? " (from its .npy header)"
                : meta.token_dtype ? " (from dataset_metadata.json)"
                                   : " (from --token-dtype)",
                docs.c_str());
    if (f.documents) {
      documents += *f.documents;
      ++with_docs;
    }
  }
  std::printf("  tokens       %llu\n", static_cast<unsigned long long>(split.total_tokens()));
  if (with_docs > 0) {
    std::printf("  docs.npy     %llu documents, offsets beside %llu of %zu files\n",
                static_cast<unsigned long long>(documents), static_cast<unsigned long long>(with_docs),
                split.files().size());
  }
}

// The windows --block-size gives (none without it); why the loader would refuse the split
// for want of one window, if it would.
std::optional<std::string> report_stream_windows(const InspectOptions& o, const TokenStreamSplit& split) {
  std::uint64_t largest = 0;
  for (const StreamFile& f : split.files()) largest = std::max(largest, f.tokens);
  if (o.block_size <= 0) {
    if (largest < 2) return "no file holds 2 tokens, the window of the smallest block_size (1)";
    return std::nullopt;
  }
  const auto block = static_cast<std::size_t>(o.block_size);
  const std::uint64_t starts = TokenStreamBatchSource::sample_count(split, block, SamplingMode::random);
  std::printf("  block %-6ld %llu windows per epoch (epoch mode), %llu window starts (random mode)\n", o.block_size,
              static_cast<unsigned long long>(TokenStreamBatchSource::sample_count(split, block, SamplingMode::epoch)),
              static_cast<unsigned long long>(starts));
  if (starts != 0) return std::nullopt;
  return "no file holds one window of block_size + 1 = " + std::to_string(block + 1) + " tokens (the largest holds " +
         std::to_string(largest) + ")";
}

// One pass over every token: document lengths at each end-of-text id `eos` and, with
// --deep, ids against vocab_size (the first offender located). Returns whether an id is out
// of the vocabulary.
bool scan_stream_tokens(const InspectOptions& o, const DatasetMetadata& meta, const TokenStreamSplit& split,
                        std::optional<std::int64_t> eos) {
  const bool check_vocab = o.deep && meta.vocab_size;
  std::vector<std::uint64_t> lengths;
  std::uint64_t current = 0, out_of_vocab = 0;
  std::optional<std::pair<std::size_t, std::uint64_t>> first_bad;  // (file, token offset)
  for (std::size_t fi = 0; fi < split.files().size(); ++fi) {
    for (std::uint64_t i = 0; i < split.files()[fi].tokens; ++i) {
      const std::uint32_t t = split.token_at(fi, i);
      if (check_vocab && t >= static_cast<std::uint64_t>(*meta.vocab_size)) {
        ++out_of_vocab;
        if (!first_bad) first_bad.emplace(fi, i);
      }
      ++current;
      if (eos && t == static_cast<std::uint64_t>(*eos)) {
        lengths.push_back(current);
        current = 0;
      }
    }
  }
  if (eos) {
    std::printf("  documents    %zu end-of-text tokens (id %lld)%s\n", lengths.size(), static_cast<long long>(*eos),
                current > 0 ? (", plus " + std::to_string(current) + " trailing tokens").c_str() : "");
    std::sort(lengths.begin(), lengths.end());
    if (!lengths.empty()) {
      std::printf("  doc lengths  min %llu, median %llu, p90 %llu, p99 %llu, max %llu\n",
                  static_cast<unsigned long long>(lengths.front()),
                  static_cast<unsigned long long>(nearest_rank(lengths, 0.5)),
                  static_cast<unsigned long long>(nearest_rank(lengths, 0.9)),
                  static_cast<unsigned long long>(nearest_rank(lengths, 0.99)),
                  static_cast<unsigned long long>(lengths.back()));
    }
  }
  if (!check_vocab) return false;
  std::string where;
  if (first_bad) {
    const auto [fi, offset] = *first_bad;
    where = " (first: token " + std::to_string(split.token_at(fi, offset)) + " at token offset " +
            std::to_string(offset) + " of '" + split.files()[fi].map.path().string() + "')";
  }
  std::printf("  deep         %llu tokens >= vocab_size %lld%s\n", static_cast<unsigned long long>(out_of_vocab),
              static_cast<long long>(*meta.vocab_size), where.c_str());
  return out_of_vocab > 0;
}

void inspect_stream_split(const InspectOptions& o, const DatasetMetadata& meta, std::optional<TokenDtype> dtype,
                          const std::string& name, Findings& found) {
  std::printf("split %s (token stream)\n", name.c_str());
  std::optional<TokenStreamSplit> opened;
  try {
    opened.emplace(TokenStreamSplit::open(o.dataset_dir, name, dtype));
  } catch (const Error& e) {
    std::printf("  verdict      INVALID: %s\n", e.what());
    found.refuse(e.kind(), e.what());
    return;
  }
  const TokenStreamSplit& split = *opened;
  describe_stream_files(meta, name, split, found);
  const std::optional<std::string> refusal = report_stream_windows(o, split);  // why the loader would refuse it
  const std::optional<std::int64_t> eos = end_of_text_id(given_eos(o), meta);
  bool bad_ids = false;
  if (eos || (o.deep && meta.vocab_size)) {
    bad_ids = scan_stream_tokens(o, meta, split, eos);
  } else {
    std::printf("  documents    unknown: no end-of-text id (pass --eos-id or set eos_token_id in dataset_metadata.json)\n");
  }
  if (o.deep && !meta.vocab_size) std::printf("  deep         token ids not checked: dataset_metadata.json has no vocab_size\n");
  found.bad_token_ids = found.bad_token_ids || bad_ids;
  const bool bad_sums_before = found.bad_checksums;
  if (o.deep) deep_check_stream_checksums(fs::path(o.dataset_dir), meta, name, found);
  const bool bad_sums = found.bad_checksums && !bad_sums_before;
  if (refusal) {
    std::printf("  verdict      INVALID: %s%s\n", refusal->c_str(),
                o.block_size > 0 ? "; the loader refuses this split at this block_size" : "");
    found.refuse(ErrorKind::format, "split '" + name + "' of '" + o.dataset_dir + "': " + *refusal);
    return;
  }
  std::printf("  verdict      %s\n", bad_ids    ? "INVALID: token ids out of vocabulary"
                                     : bad_sums ? "INVALID: content checksum mismatch"
                                                : "ok");
}

// The block size of a token-stream snippet without --block-size: the largest power of two
// up to 1024 that gives every split a batch's worth of whole (non-overlapping) windows, one
// per row, so that epoch sampling forms a batch too; else the largest that leaves every
// split one window start (enough for random sampling); 0 when not even block 1 fits.
long stream_block_size(const Findings& found, std::string& why) {
  const auto fits = [&](std::uint64_t block, bool per_batch) {
    for (const std::vector<std::uint64_t>& files : found.stream_files) {
      std::uint64_t windows = 0, starts = 0;
      for (const std::uint64_t n : files) {
        windows += n / (block + 1);
        starts += n > block ? n - block : 0;
      }
      if (per_batch ? windows < static_cast<std::uint64_t>(kSnippetBatchSize) : starts == 0) return false;
    }
    return true;
  };
  for (const bool per_batch : {true, false}) {
    for (long block = kSnippetBlockSize; block >= 1; block /= 2) {
      if (!fits(static_cast<std::uint64_t>(block), per_batch)) continue;
      if (block == kSnippetBlockSize && per_batch) {
        why = "assumed, no --block-size given";
      } else {
        why = "chosen, no --block-size given: the largest power of two up to " + std::to_string(kSnippetBlockSize) +
              (per_batch ? " with " + std::to_string(kSnippetBatchSize) + " whole windows (one per batch row) in every split"
                         : " with one window in every split (too short for a batch of whole windows)");
      }
      return block;
    }
  }
  return 0;
}

// A ready-to-use <training> element for what inspect found, checked against what the
// loader needs: train forms one batch, and a token stream has a window in every split.
void print_config(const InspectOptions& o, const ResolvedOptions& run, Layout mode, const Findings& found) {
  const DatasetMetadata& meta = run.metadata;
  const bool episodes = mode == Layout::episodes;
  long block = o.block_size;
  std::string block_note;
  if (block == 0 && episodes) {
    block = kSnippetBlockSize;
    block_note = "assumed, no --block-size given: longer episodes are truncated (see inspect --block-size)";
  } else if (block == 0) {
    block = stream_block_size(found, block_note);
  }
  // Epoch sampling with epoch_drop_last needs one whole batch in train.
  long batch = kSnippetBatchSize;
  std::string batch_note;
  const std::uint64_t units = !episodes ? 0 : o.packed ? found.train_packed_rows : found.train_kept;
  if (episodes && units < static_cast<std::uint64_t>(batch)) {
    batch = static_cast<long>(units);
    batch_note = "train has only " + std::to_string(units) + (o.packed ? " packed rows" : " kept episodes");
  }
  const auto note = [](const std::string& text) { return text.empty() ? std::string() : "  <!-- " + xml_escape(text) + " -->"; };
  std::printf("\n<training>\n");
  std::printf("  <dataset_dir>%s</dataset_dir>\n", xml_escape(fs::absolute(o.dataset_dir).lexically_normal().string()).c_str());
  std::printf("  <dataset_mode>%s</dataset_mode>\n", !episodes ? "token_stream" : o.packed ? "sft_packed" : "sft_episode");
  std::printf("  <batch_size>%ld</batch_size>%s\n", batch, note(batch_note).c_str());
  std::printf("  <block_size>%ld</block_size>%s\n", block, note(block_note).c_str());
  if (episodes) {
    std::printf("  <batch_sampling_mode>epoch</batch_sampling_mode>\n");
    // auto (the default) is what the loader does: on when every shard has mask.bin.
    std::printf(
        "  <use_loss_mask>auto</use_loss_mask>%s\n",
        note(found.mask ? "on: the dataset has mask.bin" : "off: no mask.bin, every position is trained on").c_str());
    // The loader's pad id: the metadata's pad_token_id, eot_token_id, eos_token_id; with
    // none of them, the loader needs one in the config.
    if (!pad_from_metadata(run.config, meta)) {
      std::printf("  <pad_token_id>0</pad_token_id>  <!-- set: no eot_token_id in the metadata -->\n");
    }
    if (o.packed) {
      // The settings the packing efficiency above was measured with.
      std::printf("  <truncation>%s</truncation>\n", to_string(o.truncation));
      std::printf("  <pack_lookahead>%ld</pack_lookahead>\n", o.pack_lookahead);
      std::printf("  <epoch_seed>%ld</epoch_seed>\n", o.seed);
    }
  } else {
    std::printf("  <batch_sampling_mode>random</batch_sampling_mode>\n");
    const bool eos_known = end_of_text_id(given_eos(o), meta).has_value();
    std::printf("  <document_aware>%s</document_aware>\n", eos_known ? "true" : "false");
    if (o.eos_id >= 0) std::printf("  <eos_token_id>%ld</eos_token_id>\n", o.eos_id);
  }
  // The dtype when the dataset does not record it: inferred from (or given for) episode
  // files, or given with --token-dtype for .bin stream files (.npy files carry their own).
  const std::optional<TokenDtype> unrecorded = meta.token_dtype ? std::nullopt : episodes ? found.dtype : found.bin_dtype;
  if (unrecorded) std::printf("  <token_dtype>%s</token_dtype>\n", to_string(*unrecorded));
  std::printf("</training>\n");
}

// Combinations that make no sense whatever the dataset: refused before reading it.
void check_options(const InspectOptions& o) {
  if (o.packed && o.block_size == 0) {
    throw Error(ErrorKind::usage, "inspect --packed needs --block-size T: packing fills rows of T positions");
  }
  if (o.packing_option_given && !o.packed) {
    throw Error(ErrorKind::usage, "inspect --pack-lookahead, --truncation and --seed describe the packing that --packed "
                                  "reports; add --packed --block-size T");
  }
}

void inspect(const InspectOptions& o) {
  check_options(o);
  const fs::path root(o.dataset_dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    throw Error(ErrorKind::io, "dataset directory '" + o.dataset_dir + "' does not exist");
  }
  const DatasetMetadata meta = read_dataset_metadata(root);
  const std::string metadata_file = (root / "dataset_metadata.json").string();

  // The token dtype as the loader takes it: the metadata's, else the one given (which must
  // not contradict the metadata), else inferred (episodes) or read from .npy headers.
  const std::optional<TokenDtype> given = o.token_dtype.empty() ? std::nullopt : parse_token_dtype(o.token_dtype);
  const std::optional<TokenDtype> dtype = settle_dtype(
      given, meta.token_dtype, GivenSetting{"--token-dtype", ErrorKind::usage, "drop the option"}, metadata_file);
  const ResolvedOptions run = assumed_run(o, meta, dtype);

  // Which splits the loader reads, and how: the layout of train decides (as dataset_mode's
  // auto-detection does), and val is read in the same layout when it has one. Without a
  // train split, val is still described, but the dataset cannot be loaded.
  const Layout train = layout_of(root, "train");
  const Layout mode = train != Layout::none ? train : layout_of(root, "val");
  if (mode == Layout::none) {
    throw Error(ErrorKind::io, "dataset directory '" + o.dataset_dir +
                                   "' has no train or val split (episode-indexed train/, or train.bin / train/*.bin / "
                                   "train/*.npy)");
  }
  std::vector<std::string> splits;
  if (train != Layout::none) splits.push_back("train");
  const bool val = mode == Layout::episodes ? fs::exists(root / "val", ec) : TokenStreamSplit::has_split(root, "val");
  if (val) splits.push_back("val");

  if (o.packed && mode == Layout::stream) {
    throw Error(ErrorKind::usage, "inspect --packed reports how sft_packed packs the episodes of an episode-indexed "
                                  "dataset, but '" + o.dataset_dir + "' is a token stream");
  }
  if (o.packed && o.truncation == Truncation::drop_oldest_turns && !meta.special_tokens) {
    throw Error(ErrorKind::usage, "inspect --truncation drop_oldest_turns finds turns from the chat template's ids, but '" +
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

  std::printf("dataset %s%s\n", o.dataset_dir.c_str(), meta.present ? "" : " (no dataset_metadata.json)");
  Findings found;
  for (const std::string& name : splits) {
    if (mode == Layout::episodes) {
      inspect_split(o, run, name, found);
    } else {
      inspect_stream_split(o, meta, dtype, name, found);
    }
  }
  if (mode == Layout::episodes && !val && TokenStreamSplit::has_split(root, "val")) {
    std::printf("split val      ignored: val.bin is a token stream; an episode-indexed dataset reads val/ only\n");
  }
  if (mode == Layout::stream && !val && fs::exists(root / "val", ec)) {
    std::printf("split val      ignored: val/ holds no *.bin or *.npy token files\n");
  }
  if (train == Layout::none) {
    const std::string why = "no train split: the loader needs " +
                            std::string(mode == Layout::episodes ? "train/" : "train.bin or train/ with *.bin / *.npy");
    std::printf("dataset      INVALID: %s\n", why.c_str());
    found.refuse(ErrorKind::io, "dataset '" + o.dataset_dir + "' has " + why);
  }
  // A snippet for a dataset the loader refuses would only fail later.
  if (o.print_config && !found.refused) print_config(o, run, mode, found);
  if (found.refused) throw Error(found.refused->kind, found.refused->message);
  if (found.bad_token_ids) {
    throw Error(ErrorKind::format, "dataset '" + o.dataset_dir + "' holds token ids outside the vocabulary");
  }
  if (found.bad_checksums) {
    throw Error(ErrorKind::format,
                "dataset '" + o.dataset_dir + "' does not match the content checksums in its dataset_metadata.json");
  }
  if (found.bad_mask_values) {
    throw Error(ErrorKind::format, "dataset '" + o.dataset_dir + "' holds mask values out of range");
  }
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe and validate a dataset (episode-indexed or token stream)");
  CLI::Option* dir =
      cmd->add_option("dataset_dir", options->dataset_dir, "Dataset directory (holding train/ and val/)");
  CLI::Option* config = cmd->add_option("--config", options->config,
                                        "A config with a <mixture>: print each stage's share of rows, real and "
                                        "trained tokens per source over --steps, and the epoch each source reaches")
                            ->check(CLI::ExistingFile)
                            ->excludes(dir);
  CLI::Option* steps = cmd->add_option("--steps", options->steps, "--config: the steps to read")
                           ->check(CLI::PositiveNumber)
                           ->capture_default_str();
  cmd->add_option("--block-size", options->block_size,
                  "Report what truncation to this block size would drop (episodes), or the windows it gives (token "
                  "streams); also the snippet's block_size")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--deep", options->deep,
                "Also check every token against vocab_size, mask values (uint8 not 0/1, float32 negative), all-zero "
                "masks, and each shard against the content checksums in dataset_metadata.json");
  cmd->add_option("--eos-id", options->eos_id, "End-of-text id for counting documents in a token stream")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--token-dtype", options->token_dtype,
                  "Token dtype of .bin files when dataset_metadata.json does not record it (nanoGPT train.bin/val.bin)")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  cmd->add_flag("--print-config", options->print_config, "Print a ready-to-use <training> config for this dataset");
  cmd->add_flag("--packed", options->packed,
                "With --block-size: the packing efficiency of sft_packed against padded sft_episode rows");
  CLI::Option* lookahead = cmd->add_option("--pack-lookahead", options->pack_lookahead, "--packed: the packer's lookahead")
                               ->check(CLI::Range(1, 65536))
                               ->capture_default_str();
  auto truncation_name = std::make_shared<std::string>("right");
  CLI::Option* truncation = cmd->add_option("--truncation", *truncation_name, "--packed: how long episodes are cut")
                                ->check(CLI::IsMember({"right", "drop_oldest_turns", "split"}))
                                ->capture_default_str();
  CLI::Option* seed = cmd->add_option("--seed", options->seed, "--packed: epoch_seed (epoch 0's order)")
                          ->check(CLI::Range(0L, 4294967295L))
                          ->capture_default_str();
  cmd->callback([options, truncation_name, lookahead, truncation, seed, dir, config, steps] {
    if (config->count() > 0) {
      inspect_mixture(options->config, options->steps);
      return;
    }
    if (dir->count() == 0) throw CLI::RequiredError("dataset_dir (or --config FILE for a mixture)");
    if (steps->count() > 0) throw CLI::ValidationError("--steps", "needs --config");
    Config parsed;  // the config key's own parser names the rule
    set_config_value(parsed, "truncation", *truncation_name);
    options->truncation = parsed.truncation;
    options->packing_option_given = lookahead->count() + truncation->count() + seed->count() > 0;
    inspect(*options);
  });
}

}  // namespace tokenfeed::cli
