// deep: a split's shards against the SHA-256 that dataset_metadata.json records for them.
#include <map>
#include <string>
#include <vector>

#include "inspect/split_reports.hpp"

namespace tokenfeed {
namespace {

bool belongs_to(const std::string& shard, const std::string& split) {
  return shard == split || shard.starts_with(split + "/");
}

// What differs between a shard's files and the record of them.
void compare_shard(const std::string& key, const ShardChecksums& files, const ShardChecksums& recorded,
                   std::vector<std::string>& problems) {
  for (const auto& [file, hex] : recorded) {
    const auto got = files.find(file);
    if (got == files.end()) {
      problems.push_back(key + "/" + file + " is missing");
    } else if (got->second != hex) {
      problems.push_back(key + "/" + file + " differs (sha256 " + got->second.substr(0, 16) + "..., recorded " +
                         hex.substr(0, 16) + "...)");
    }
  }
  for (const auto& [file, hex] : files) {
    if (recorded.count(file) == 0) problems.push_back(key + "/" + file + " has no recorded checksum");
  }
}

}  // namespace

ChecksumCheck compare_checksums(const DatasetMetadata& meta, const std::string& name,
                                const std::map<std::string, ShardChecksums>& actual) {
  ChecksumCheck check;
  for (const auto& [shard, files] : meta.content_sha256) check.recorded = check.recorded || belongs_to(shard, name);
  if (!check.recorded) return check;
  check.shards = actual.size();
  for (const auto& [key, files] : actual) {
    const auto it = meta.content_sha256.find(key);
    if (it == meta.content_sha256.end()) {
      check.problems.push_back(key + " has no recorded checksum");
    } else {
      compare_shard(key, files, it->second, check.problems);
    }
  }
  for (const auto& [shard, files] : meta.content_sha256) {
    if (belongs_to(shard, name) && actual.count(shard) == 0)
      check.problems.push_back(shard + " is recorded but missing");
  }
  return check;
}

}  // namespace tokenfeed
