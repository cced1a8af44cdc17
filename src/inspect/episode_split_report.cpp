// An episode-indexed split: what it holds, whether the loader would read it, and (deep)
// token ids, mask values, all-zero masks and content checksums.
#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dataset/content_checksum.hpp"
#include "dataset/layout_free_content.hpp"
#include "dataset/mask_values.hpp"
#include "inspect/split_reports.hpp"
#include "splits/episode_modes.hpp"
#include "splits/fingerprint.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kListedIds = 8;  // all-zero-mask episode ids listed

// The episode of shard `s` that token offset `offset` lies in, and the position in it.
std::optional<std::pair<std::uint64_t, std::uint64_t>> episode_at(const EpisodeSplit& split, std::size_t s,
                                                                  std::uint64_t offset) {
  const EpisodeShard& shard = split.shards()[s];
  for (std::uint64_t e = shard.first_episode; e < shard.first_episode + shard.episodes; ++e) {
    const EpisodeSpan span = split.spans()[e];
    if (offset >= span.start && offset - span.start < span.length) return std::pair{e, offset - span.start};
  }
  return std::nullopt;
}

// deep: token ids against vocab_size, the first offender located by file, offset and episode.
VocabCheck check_token_ids(const EpisodeSplit& split, std::int64_t vocab_size) {
  const auto vocab = static_cast<std::uint64_t>(vocab_size);
  VocabCheck check{vocab_size, 0, std::nullopt};
  for (std::size_t s = 0; s < split.shards().size(); ++s) {
    for (std::uint64_t i = 0; i < split.shards()[s].token_count; ++i) {
      if (split.token_at(s, i) < vocab) continue;
      ++check.out_of_vocab;
      if (check.first) continue;
      const EpisodeShard& shard = split.shards()[s];  // a foreign file's shard is the file
      check.first.emplace(VocabCheck::First{split.token_at(s, i), i,
                                            (shard.documents ? shard.dir : shard.dir / "tokens.bin").string(),
                                            std::nullopt, std::nullopt});
      if (const auto at = episode_at(split, s, i)) std::tie(check.first->episode, check.first->position) = *at;
    }
  }
  return check;
}

// deep: uint8 values other than 0 and 1 (the loader trains them as 1), float32 negative
// weights. (NaN and infinite weights already made the split INVALID: the loader refuses them.)
MaskValueCheck check_mask_values(const EpisodeSplit& split) {
  MaskValueCheck check;
  check.dtype = *split.mask_dtype();
  for (std::size_t s = 0; s < split.shards().size(); ++s) {
    const EpisodeShard& shard = split.shards()[s];
    const MaskValueScan scan = scan_mask_values(shard.mask.bytes(), check.dtype);
    const MaskValueCount& bad = check.dtype == MaskDtype::uint8 ? scan.not_binary : scan.negative;
    check.count += bad.count;
    if (bad.count == 0 || check.first) continue;
    check.first.emplace(MaskValueCheck::First{static_cast<double>(bad.first_value), bad.first_offset,
                                              (shard.dir / "mask.bin").string(), std::nullopt, std::nullopt});
    if (const auto at = episode_at(split, s, bad.first_offset)) {
      std::tie(check.first->episode, check.first->position) = *at;
    }
  }
  return check;
}

// deep: kept episodes with nothing to train on, an all-zero mask over their label positions
// mask[1:n] (mask[0] aligns with no label).
AllZeroMasks find_all_zero_masks(const EpisodeSplit& split, const IdList& kept) {
  AllZeroMasks found;
  found.kept = kept.size();
  std::vector<float> mask;
  for (const std::uint64_t e : kept) {
    mask.resize(static_cast<std::size_t>(split.spans()[e].length - 1));
    split.read_mask(e, 1, mask.size(), mask.data());
    if (std::any_of(mask.begin(), mask.end(), [](float v) { return v != 0.0f; })) continue;
    ++found.count;
    if (found.first_ids.size() < kListedIds) found.first_ids.push_back(e);
  }
  return found;
}

// deep: each shard's files against the SHA-256 recorded in dataset_metadata.json.
ChecksumCheck check_checksums(const fs::path& root, const DatasetMetadata& meta, const std::string& name,
                              const EpisodeSplit& split) {
  std::map<std::string, ShardChecksums> actual;
  for (const EpisodeShard& shard : split.shards()) {
    actual[shard.dir.lexically_relative(root).generic_string()] = checksum_shard(shard.dir);
  }
  return compare_checksums(meta, name, actual);
}

// What the split holds: layout, episodes, tokens, mask, lengths.
EpisodeFigures describe(const ResolvedOptions& run, const fs::path& dir, const EpisodeSplit& split,
                        const IdList& kept) {
  EpisodeFigures f;
  f.flat = split.shards().size() == 1 && split.shards().front().dir == dir;
  f.shards = split.shards().size();
  f.episodes = split.num_episodes();
  f.kept = kept.size();
  f.min_tokens = static_cast<std::uint64_t>(run.config.episode_min_tokens);
  f.tokens = split.total_tokens();
  f.dtype = split.token_dtype();
  f.dtype_source = run.metadata.token_dtype ? DtypeSource::metadata
                   : run.config.token_dtype ? DtypeSource::given
                                            : DtypeSource::inferred;
  f.mask = split.mask_dtype();
  f.documents = !split.shards().empty() && split.shards().front().documents != nullptr;
  if (f.documents) {  // the files say: a Megatron .idx, a datatrove .ds.metadata
    f.dtype_source =
        split.shards().front().dir.extension() == ".ds" ? DtypeSource::datatrove_metadata : DtypeSource::megatron_index;
  }
  std::vector<std::uint64_t> lengths;
  lengths.reserve(split.num_episodes());
  for (std::uint64_t e = 0; e < split.num_episodes(); ++e) lengths.push_back(split.spans()[e].length);
  f.lengths = percentiles(lengths);
  return f;
}

// deep: the checks the loader does not make, and the split's verdict flags they set.
void deep_checks(const InspectRequest& r, const ResolvedOptions& run, const EpisodeSplit& split, const IdList& kept,
                 SplitReport& report) {
  const DatasetMetadata& meta = run.metadata;
  if (meta.vocab_size) {
    report.vocab = check_token_ids(split, *meta.vocab_size);
    report.bad_token_ids = report.vocab->out_of_vocab > 0;
  }
  if (split.has_mask()) {
    EpisodeFigures& f = *report.episodes;
    f.mask_values = check_mask_values(split);
    report.bad_mask_values = f.mask_values->count > 0;
    f.all_zero = find_all_zero_masks(split, kept);
  }
  if (report.episodes->documents) return;  // nothing records a foreign file's checksums
  report.checksums = check_checksums(fs::path(r.dataset_dir), meta, report.name, split);
  report.bad_checksums = !report.checksums->problems.empty();
}

}  // namespace

SplitReport inspect_episode_split(const InspectRequest& r, const ResolvedOptions& run, const std::string& name) {
  SplitReport report;
  report.name = name;
  const fs::path dir = fs::path(r.dataset_dir) / name;
  report.dir = dir.string();
  std::optional<EpisodeSplit> opened;
  try {
    // As the loader opens it: episodes.idx, or a token stream's documents (val_fraction's
    // split of them when set).
    opened.emplace(EpisodeModes::open_episodes(run.config, name));
  } catch (const Error& e) {
    report.verdict = std::string("INVALID: ") + e.what();
    report.refusal = Refusal{e.kind(), e.what()};
    return report;
  }
  const EpisodeSplit& split = *opened;
  const IdList kept = kept_episodes(split, static_cast<std::uint64_t>(run.config.episode_min_tokens));
  report.episodes = describe(run, dir, split, kept);
  if (kept.empty()) {
    // The loader refuses a split it can sample nothing from, whatever the config.
    const std::string why = "no episode left after filtering: none of its " + std::to_string(split.num_episodes()) +
                            " episodes has >= " + std::to_string(report.episodes->min_tokens) +
                            " tokens (episode_min_tokens is at least 2)";
    report.verdict = "INVALID: " + why;
    report.refusal = Refusal{ErrorKind::format, "split '" + dir.string() + "' has " + why};
    return report;
  }
  if (r.block_size > 0) report.episodes->block = truncation_and_packing(r, run, name, split, kept);
  report.layout_free_fingerprint = hex64(layout_free_fingerprint(split).content);
  if (r.deep) {
    deep_checks(r, run, split, kept, report);
    report.content_sha256 = layout_free_digest(split);
  }
  report.verdict = report.bad_token_ids     ? "INVALID: token ids out of vocabulary"
                   : report.bad_mask_values ? "INVALID: mask values out of range"
                   : report.bad_checksums   ? "INVALID: content checksum mismatch"
                                            : "ok";
  return report;
}

}  // namespace tokenfeed
