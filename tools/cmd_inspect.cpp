// `tokenfeed inspect`: describes and validates a dataset directory, split by split.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "dataset_metadata.hpp"
#include "episode_dataset.hpp"
#include "episode_packer.hpp"
#include "episode_window.hpp"
#include "numpy_random.hpp"
#include "token_stream.hpp"
#include "token_stream_batch_source.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed::cli {
namespace {

namespace fs = std::filesystem;

struct InspectOptions {
  std::string dataset_dir;
  long block_size = 0;
  bool deep = false;
  long eos_id = -1;  // overrides the metadata's end-of-text id for token streams
  bool print_config = false;
  bool packed = false;
  long pack_lookahead = 64;
};

// What the splits showed, for --print-config.
struct Findings {
  bool episodes = false;
  bool stream = false;
  bool mask = false;
  std::optional<TokenDtype> dtype;
  bool dtype_needed = false;  // a .bin token stream whose dtype had to be given
};

std::uint64_t percentile(const std::vector<std::uint64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto index = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(index, sorted.size() - 1)];
}

// Trained (mask != 0) label positions of an episode's kept sequence: mask[1:] of it.
std::uint64_t trained_positions(const EpisodeWindows& windows, std::uint64_t episode, const SftWindow& window,
                                std::vector<float>& scratch) {
  if (window.size() < 2) return 0;
  scratch.resize(window.size() - 1);
  windows.read_mask(episode, window, 1, scratch.size(), scratch.data());
  return static_cast<std::uint64_t>(std::count_if(scratch.begin(), scratch.end(), [](float v) { return v != 0.0f; }));
}

// With --block-size T: what each truncation rule cuts, and (--packed) how full packed rows
// are against padded ones.
void report_truncation_and_packing(const InspectOptions& o, const DatasetMetadata& meta, const EpisodeSplit& split) {
  const auto S = static_cast<std::size_t>(o.block_size) + 1;
  const std::vector<std::uint64_t> kept = kept_episodes(split, 2);
  std::vector<float> scratch;
  std::uint64_t truncated = 0, full_trained = 0;
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
        if (rule == Truncation::right) full_trained += all;
      }
    }
    std::printf("  truncation   %-17s %llu tokens dropped, %s trained tokens lost\n", to_string(rule),
                static_cast<unsigned long long>(dropped_tokens),
                split.has_mask() ? std::to_string(lost_trained).c_str() : "n/a (no mask)");
  }
  if (!meta.special_tokens) {
    std::printf("  truncation   drop_oldest_turns n/a: dataset_metadata.json has no special_tokens\n");
  }
  if (!o.packed) return;
  // Packing efficiency of epoch 0's order (seed 1337, the default) against one episode per row.
  const EpisodeWindows windows(split, S, Truncation::right, std::nullopt);
  std::vector<std::uint32_t> positions_of(split.num_episodes(), 0);
  std::uint64_t padded_positions = 0;
  for (const std::uint64_t e : kept) {
    positions_of[e] = static_cast<std::uint32_t>(windows.window(e).size() - 1);
    padded_positions += positions_of[e];
  }
  std::vector<std::uint64_t> order = numpy_permutation(1337, kept.size());
  for (std::uint64_t& p : order) p = kept[p];
  const PackedEpoch packed = pack_episodes(order, positions_of, static_cast<std::uint32_t>(o.block_size),
                                           static_cast<std::size_t>(o.pack_lookahead));
  const double T = static_cast<double>(o.block_size);
  std::printf("  packing      sft_packed: %llu rows, %.1f%% of positions real (lookahead %ld); sft_episode: %zu rows, "
              "%.1f%% real\n",
              static_cast<unsigned long long>(packed.rows()),
              100.0 * static_cast<double>(packed.positions) / (static_cast<double>(packed.rows()) * T), o.pack_lookahead,
              kept.size(), 100.0 * static_cast<double>(padded_positions) / (static_cast<double>(kept.size()) * T));
}

// Returns false when the split fails validation (the message is printed as the verdict).
bool inspect_split(const InspectOptions& o, const DatasetMetadata& meta, const std::string& name, Findings& found) {
  const fs::path dir = fs::path(o.dataset_dir) / name;
  std::printf("split %s (%s)\n", name.c_str(), dir.c_str());
  EpisodeSplitOptions options;
  options.token_dtype = meta.token_dtype;
  options.mask_dtype = meta.mask_dtype;
  options.want_mask = true;
  std::optional<EpisodeSplit> opened;
  try {
    opened.emplace(EpisodeSplit::open(dir, options));
  } catch (const Error& e) {
    std::printf("  verdict      INVALID: %s\n", e.what());
    throw;
  }
  const EpisodeSplit& split = *opened;
  found.episodes = true;
  found.mask = found.mask || split.has_mask();
  found.dtype = split.token_dtype();
  const bool flat = split.shards().size() == 1 && split.shards().front().dir == dir;
  std::printf("  layout       %s, %zu shard%s\n", flat ? "flat (files directly in the split)" : "sharded",
              split.shards().size(), split.shards().size() == 1 ? "" : "s");
  std::printf("  episodes     %llu (%llu with >= 2 tokens)\n", static_cast<unsigned long long>(split.num_episodes()),
              static_cast<unsigned long long>(kept_episodes(split, 2).size()));
  std::printf("  tokens       %llu, dtype %s%s\n", static_cast<unsigned long long>(split.total_tokens()),
              to_string(split.token_dtype()), meta.token_dtype ? " (from dataset_metadata.json)" : " (inferred)");
  std::printf("  mask         %s\n", split.has_mask() ? to_string(*split.mask_dtype()) : "absent");

  std::vector<std::uint64_t> lengths;
  lengths.reserve(split.spans().size());
  for (const EpisodeSpan& s : split.spans()) lengths.push_back(s.length);
  std::sort(lengths.begin(), lengths.end());
  if (!lengths.empty()) {
    std::printf("  lengths      min %llu, median %llu, p90 %llu, p99 %llu, max %llu\n",
                static_cast<unsigned long long>(lengths.front()), static_cast<unsigned long long>(percentile(lengths, 0.5)),
                static_cast<unsigned long long>(percentile(lengths, 0.9)),
                static_cast<unsigned long long>(percentile(lengths, 0.99)),
                static_cast<unsigned long long>(lengths.back()));
  }

  if (o.block_size > 0) report_truncation_and_packing(o, meta, split);

  bool ok = true;
  if (o.deep) {
    std::uint64_t out_of_vocab = 0, all_zero_mask = 0;
    std::optional<std::uint64_t> first_bad;
    for (std::size_t s = 0; s < split.shards().size(); ++s) {
      const EpisodeShard& shard = split.shards()[s];
      if (meta.vocab_size) {
        for (std::uint64_t i = 0; i < shard.token_count; ++i) {
          if (split.token_at(s, i) >= static_cast<std::uint64_t>(*meta.vocab_size)) {
            ++out_of_vocab;
            if (!first_bad) first_bad = i;
          }
        }
      }
    }
    if (split.has_mask()) {
      std::vector<float> mask;
      for (std::uint64_t e = 0; e < split.num_episodes(); ++e) {
        mask.resize(static_cast<std::size_t>(split.spans()[e].length));
        split.read_mask(e, 0, mask.size(), mask.data());
        if (std::all_of(mask.begin(), mask.end(), [](float v) { return v == 0.0f; })) ++all_zero_mask;
      }
    }
    if (meta.vocab_size) {
      std::printf("  deep         %llu tokens >= vocab_size %lld%s\n", static_cast<unsigned long long>(out_of_vocab),
                  static_cast<long long>(*meta.vocab_size),
                  first_bad ? (" (first at token offset " + std::to_string(*first_bad) + ")").c_str() : "");
      ok = out_of_vocab == 0;
    } else {
      std::printf("  deep         token ids not checked: dataset_metadata.json has no vocab_size\n");
    }
    if (split.has_mask()) {
      std::printf("  deep         %llu episodes with an all-zero mask (nothing to train on)\n",
                  static_cast<unsigned long long>(all_zero_mask));
    }
  }
  std::printf("  verdict      %s\n", ok ? "ok" : "INVALID: token ids out of vocabulary");
  return ok;
}

bool inspect_stream_split(const InspectOptions& o, const DatasetMetadata& meta, const std::string& name,
                          Findings& found) {
  std::printf("split %s (token stream)\n", name.c_str());
  std::optional<TokenStreamSplit> opened;
  try {
    opened.emplace(TokenStreamSplit::open(o.dataset_dir, name, meta.token_dtype));
  } catch (const Error& e) {
    std::printf("  verdict      INVALID: %s\n", e.what());
    throw;
  }
  const TokenStreamSplit& split = *opened;
  found.stream = true;
  found.dtype = split.common_dtype();
  for (const StreamFile& f : split.files()) {
    if (f.map.path().extension() == ".bin") found.dtype_needed = true;
  }
  std::printf("  layout       %s, %zu file%s\n", split.flat() ? ("flat (" + name + ".bin)").c_str() : "sharded",
              split.files().size(), split.files().size() == 1 ? "" : "s");
  for (const StreamFile& f : split.files()) {
    std::printf("  file         %s: %llu tokens, %s\n", f.map.path().filename().c_str(),
                static_cast<unsigned long long>(f.tokens), to_string(f.dtype));
  }
  std::printf("  tokens       %llu\n", static_cast<unsigned long long>(split.total_tokens()));
  if (o.block_size > 0) {
    const auto block = static_cast<std::size_t>(o.block_size);
    std::printf("  block %-6ld %llu windows per epoch (epoch mode), %llu window starts (random mode)\n", o.block_size,
                static_cast<unsigned long long>(TokenStreamBatchSource::sample_count(split, block, SamplingMode::epoch)),
                static_cast<unsigned long long>(TokenStreamBatchSource::sample_count(split, block, SamplingMode::random)));
  }
  std::optional<std::int64_t> eos = o.eos_id >= 0 ? std::optional<std::int64_t>(o.eos_id)
                                                  : (meta.eos_token_id ? meta.eos_token_id : meta.eot_token_id);
  bool ok = true;
  std::uint64_t out_of_vocab = 0;
  if (eos || (o.deep && meta.vocab_size)) {
    // One pass over every token: document lengths and, with --deep, the vocabulary check.
    std::vector<std::uint64_t> lengths;
    std::uint64_t current = 0;
    for (std::size_t fi = 0; fi < split.files().size(); ++fi) {
      for (std::uint64_t i = 0; i < split.files()[fi].tokens; ++i) {
        const std::uint32_t t = split.token_at(fi, i);
        if (o.deep && meta.vocab_size && t >= static_cast<std::uint64_t>(*meta.vocab_size)) ++out_of_vocab;
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
                    static_cast<unsigned long long>(percentile(lengths, 0.5)),
                    static_cast<unsigned long long>(percentile(lengths, 0.9)),
                    static_cast<unsigned long long>(percentile(lengths, 0.99)),
                    static_cast<unsigned long long>(lengths.back()));
      }
    }
    if (o.deep && meta.vocab_size) {
      std::printf("  deep         %llu tokens >= vocab_size %lld\n", static_cast<unsigned long long>(out_of_vocab),
                  static_cast<long long>(*meta.vocab_size));
      ok = out_of_vocab == 0;
    }
  } else {
    std::printf("  documents    unknown: no end-of-text id (pass --eos-id or set eos_token_id in dataset_metadata.json)\n");
  }
  if (o.deep && !meta.vocab_size) std::printf("  deep         token ids not checked: dataset_metadata.json has no vocab_size\n");
  std::printf("  verdict      %s\n", ok ? "ok" : "INVALID: token ids out of vocabulary");
  return ok;
}

// A ready-to-use <training> element for what inspect found.
void print_config(const InspectOptions& o, const DatasetMetadata& meta, const Findings& found) {
  const long block = o.block_size > 0 ? o.block_size : 1024;
  std::printf("\n<training>\n");
  std::printf("  <dataset_dir>%s</dataset_dir>\n", fs::absolute(o.dataset_dir).lexically_normal().c_str());
  std::printf("  <dataset_mode>%s</dataset_mode>\n", found.episodes ? "sft_episode" : "token_stream");
  std::printf("  <batch_size>8</batch_size>\n");
  std::printf("  <block_size>%ld</block_size>\n", block);
  if (found.episodes) {
    std::printf("  <batch_sampling_mode>epoch</batch_sampling_mode>\n");
    std::printf("  <use_loss_mask>%s</use_loss_mask>\n", found.mask ? "true" : "false");
    if (!meta.eot_token_id && !meta.eos_token_id) std::printf("  <pad_token_id>0</pad_token_id>  <!-- set: no eot_token_id in the metadata -->\n");
  } else {
    std::printf("  <batch_sampling_mode>random</batch_sampling_mode>\n");
    const bool eos_known = o.eos_id >= 0 || meta.eos_token_id || meta.eot_token_id;
    std::printf("  <document_aware>%s</document_aware>\n", eos_known ? "true" : "false");
    if (o.eos_id >= 0) std::printf("  <eos_token_id>%ld</eos_token_id>\n", o.eos_id);
  }
  if (found.dtype && !meta.token_dtype && (found.episodes || found.dtype_needed)) {
    std::printf("  <token_dtype>%s</token_dtype>\n", to_string(*found.dtype));
  }
  std::printf("</training>\n");
}

void inspect(const InspectOptions& o) {
  std::error_code ec;
  if (!fs::is_directory(o.dataset_dir, ec)) {
    throw Error(ErrorKind::io, "dataset directory '" + o.dataset_dir + "' does not exist");
  }
  const DatasetMetadata meta = read_dataset_metadata(o.dataset_dir);
  std::printf("dataset %s%s\n", o.dataset_dir.c_str(), meta.present ? "" : " (no dataset_metadata.json)");
  bool any = false, ok = true;
  Findings found;
  for (const char* name : {"train", "val"}) {
    const fs::path dir = fs::path(o.dataset_dir) / name;
    if (EpisodeSplit::looks_like_episode_split(dir) ||
        (fs::is_directory(dir, ec) && !TokenStreamSplit::has_split(o.dataset_dir, name))) {
      any = true;
      ok = inspect_split(o, meta, name, found) && ok;
    } else if (TokenStreamSplit::has_split(o.dataset_dir, name)) {
      any = true;
      ok = inspect_stream_split(o, meta, name, found) && ok;
    }
  }
  if (!any) {
    throw Error(ErrorKind::io, "dataset directory '" + o.dataset_dir +
                                   "' has no train or val split (episode-indexed train/, or train.bin / train/*.bin / "
                                   "train/*.npy)");
  }
  if (o.print_config) print_config(o, meta, found);
  if (!ok) throw Error(ErrorKind::format, "dataset '" + o.dataset_dir + "' holds token ids outside the vocabulary");
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe and validate a dataset (episode-indexed or token stream)");
  cmd->add_option("dataset_dir", options->dataset_dir, "Dataset directory (holding train/ and val/)")->required();
  cmd->add_option("--block-size", options->block_size, "Report what truncation to this block size would drop")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--deep", options->deep, "Also check every token against vocab_size and flag all-zero masks");
  cmd->add_option("--eos-id", options->eos_id, "End-of-text id for counting documents in a token stream")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--print-config", options->print_config, "Print a ready-to-use <training> config for this dataset");
  cmd->add_flag("--packed", options->packed,
                "With --block-size: the packing efficiency of sft_packed against padded sft_episode rows");
  cmd->add_option("--pack-lookahead", options->pack_lookahead, "The packer's lookahead for --packed")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  cmd->callback([options] { inspect(*options); });
}

}  // namespace tokenfeed::cli
