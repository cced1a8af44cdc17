// Content checksums of an episode-indexed dataset: the SHA-256 of each file of each shard,
// recorded in dataset_metadata.json so that a dataset copied between machines can be
// verified end to end (`tokenfeed inspect --deep`):
//
//   "content_sha256": {"train/shard_00000": {"episodes.idx": "<hex>", "tokens.bin": "<hex>",
//                                            "mask.bin": "<hex>"}, ...}
//
// A shard is named by its directory relative to the dataset directory ("train" for a split
// in the flat layout). tokenfeed prepare and EpisodeDatasetWriter record them.
//
// Thread-safety: free functions; record_content_checksums must not race another writer of
// the same dataset_metadata.json.
#pragma once

#include <filesystem>
#include <map>
#include <string>

namespace tokenfeed {

using ShardChecksums = std::map<std::string, std::string>;       // file name -> hex SHA-256
using ContentChecksums = std::map<std::string, ShardChecksums>;  // shard -> its files

inline constexpr const char* kChecksummedFiles[] = {"episodes.idx", "tokens.bin", "mask.bin"};

// The checksums of the files of kChecksummedFiles present in `shard_dir`.
ShardChecksums checksum_shard(const std::filesystem::path& shard_dir);

// The checksums of every regular file of a sharded token-stream split (its shard_NNNNN.npy
// and shard_NNNNN.docs.npy), which `tokenfeed prepare-text` records under the split's name
// ("train" -> file -> hex).
ShardChecksums checksum_stream_split(const std::filesystem::path& split_dir);

// Replaces the entries of split `split` (the key `split` and keys `split/...`) in
// dataset_dir/dataset_metadata.json's "content_sha256" by `checksums`, keeping every other
// field; creates the file when absent. Written to a temporary file and renamed, so that a
// reader never sees it half-written. Throws Error(io) or Error(format) for an unreadable or
// invalid existing file.
void record_content_checksums(const std::filesystem::path& dataset_dir, const std::string& split,
                              const ContentChecksums& checksums);

}  // namespace tokenfeed
