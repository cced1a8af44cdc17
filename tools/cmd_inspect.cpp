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
#include "tokenfeed/error.hpp"

namespace tokenfeed::cli {
namespace {

namespace fs = std::filesystem;

struct InspectOptions {
  std::string dataset_dir;
  long block_size = 0;
  bool deep = false;
};

std::uint64_t percentile(const std::vector<std::uint64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const auto index = static_cast<std::size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
  return sorted[std::min(index, sorted.size() - 1)];
}

// Returns false when the split fails validation (the message is printed as the verdict).
bool inspect_split(const InspectOptions& o, const DatasetMetadata& meta, const std::string& name) {
  const fs::path dir = fs::path(o.dataset_dir) / name;
  std::printf("split %s (%s)\n", name.c_str(), dir.c_str());
  EpisodeSplitOptions options;
  options.token_dtype = meta.token_dtype;
  options.mask_dtype = meta.mask_dtype;
  options.want_mask = true;
  options.episode_min_tokens = 2;
  std::optional<EpisodeSplit> opened;
  try {
    opened.emplace(EpisodeSplit::open(dir, options));
  } catch (const Error& e) {
    std::printf("  verdict      INVALID: %s\n", e.what());
    throw;
  }
  const EpisodeSplit& split = *opened;
  const bool flat = split.shards().size() == 1 && split.shards().front().dir == dir;
  std::printf("  layout       %s, %zu shard%s\n", flat ? "flat (files directly in the split)" : "sharded",
              split.shards().size(), split.shards().size() == 1 ? "" : "s");
  std::printf("  episodes     %llu (%llu with >= 2 tokens)\n", static_cast<unsigned long long>(split.num_episodes()),
              static_cast<unsigned long long>(split.kept().size()));
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

  if (o.block_size > 0) {
    // An episode keeps its first L = block_size + 1 tokens; the trained positions it loses
    // are the mask values from position L on.
    const auto L = static_cast<std::uint64_t>(o.block_size) + 1;
    std::uint64_t truncated = 0, dropped_tokens = 0, dropped_trained = 0;
    std::vector<float> mask;
    for (std::uint64_t e = 0; e < split.num_episodes(); ++e) {
      const std::uint64_t n = split.spans()[e].length;
      if (n <= L) continue;
      ++truncated;
      dropped_tokens += n - L;
      if (split.has_mask()) {
        mask.resize(static_cast<std::size_t>(n - L));
        split.read_mask(e, L, mask.size(), mask.data());
        dropped_trained += static_cast<std::uint64_t>(std::count_if(mask.begin(), mask.end(), [](float v) { return v != 0.0f; }));
      }
    }
    std::printf("  block %-6ld %llu episodes truncated (%.2f%%), %llu tokens dropped, %s trained tokens dropped\n",
                o.block_size, static_cast<unsigned long long>(truncated),
                split.num_episodes() ? 100.0 * static_cast<double>(truncated) / static_cast<double>(split.num_episodes()) : 0.0,
                static_cast<unsigned long long>(dropped_tokens),
                split.has_mask() ? std::to_string(dropped_trained).c_str() : "n/a (no mask)");
  }

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

void inspect(const InspectOptions& o) {
  std::error_code ec;
  if (!fs::is_directory(o.dataset_dir, ec)) {
    throw Error(ErrorKind::io, "dataset directory '" + o.dataset_dir + "' does not exist");
  }
  const DatasetMetadata meta = read_dataset_metadata(o.dataset_dir);
  std::printf("dataset %s%s\n", o.dataset_dir.c_str(), meta.present ? "" : " (no dataset_metadata.json)");
  bool any = false, ok = true;
  for (const char* name : {"train", "val"}) {
    if (!fs::exists(fs::path(o.dataset_dir) / name, ec)) continue;
    any = true;
    ok = inspect_split(o, meta, name) && ok;
  }
  if (!any) throw Error(ErrorKind::io, "dataset directory '" + o.dataset_dir + "' has no train/ or val/ split");
  if (!ok) throw Error(ErrorKind::format, "dataset '" + o.dataset_dir + "' holds token ids outside the vocabulary");
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Describe and validate an episode-indexed dataset");
  cmd->add_option("dataset_dir", options->dataset_dir, "Dataset directory (holding train/ and val/)")->required();
  cmd->add_option("--block-size", options->block_size, "Report what truncation to this block size would drop")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--deep", options->deep, "Also check every token against vocab_size and flag all-zero masks");
  cmd->callback([options] { inspect(*options); });
}

}  // namespace tokenfeed::cli
