// The pieces of inspect_dataset, one unit each: an episode-indexed split
// (episode_split_report.cpp), its truncation and packing figures (packing_report.cpp), a
// token-stream split (stream_split_report.cpp), the content checksums of either
// (checksum_report.cpp), and the <training> snippet (suggested_config.cpp).
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dataset/content_checksum.hpp"
#include "dataset/dataset_metadata.hpp"
#include "dataset/episode_dataset.hpp"
#include "inspect/inspect_report.hpp"
#include "splits/resolved_options.hpp"
#include "measure/nearest_rank.hpp"
#include "util/id_list.hpp"

namespace tokenfeed {

// The run inspect describes: the loader's defaults with the request's options over them,
// each epoch's rows in full and one rank, reading with `dtype` (the metadata's, the given
// one or none).
ResolvedOptions assumed_run(const InspectRequest& request, const DatasetMetadata& meta,
                            std::optional<TokenDtype> dtype);

// An episode-indexed split, as the loader opens it with `run`.
SplitReport inspect_episode_split(const InspectRequest& request, const ResolvedOptions& run, const std::string& name);

// With block_size: what each truncation rule cuts, and (packed) how full packed rows are.
EpisodeBlockFigures truncation_and_packing(const InspectRequest& request, const ResolvedOptions& run,
                                           const std::string& name, const EpisodeSplit& split, const IdList& kept);

// A token-stream split, its .bin files read with `dtype`.
SplitReport inspect_stream_split(const InspectRequest& request, const DatasetMetadata& meta,
                                 std::optional<TokenDtype> dtype, const std::string& name);

// `actual` (each shard's key, relative to the dataset directory, with its files' SHA-256)
// against what the metadata records for split `name`.
ChecksumCheck compare_checksums(const DatasetMetadata& meta, const std::string& name,
                                const std::map<std::string, ShardChecksums>& actual);

// The percentiles of `lengths` (sorted in place), as `tokenfeed bench` reports its own
// (nearest rank); nullopt when there are none.
inline std::optional<LengthPercentiles> percentiles(std::vector<std::uint64_t>& lengths) {
  if (lengths.empty()) return std::nullopt;
  std::sort(lengths.begin(), lengths.end());
  return LengthPercentiles{lengths.front(), nearest_rank(lengths, 0.5), nearest_rank(lengths, 0.9),
                           nearest_rank(lengths, 0.99), lengths.back()};
}

// The snippet for a dataset the loader accepts (no split refused, train present).
std::vector<SuggestedKey> suggest_config(const InspectRequest& request, const ResolvedOptions& run,
                                         const DatasetReport& report);

}  // namespace tokenfeed
