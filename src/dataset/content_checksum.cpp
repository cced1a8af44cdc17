#include "dataset/content_checksum.hpp"

#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "dataset/dataset_metadata.hpp"
#include "util/sha256.hpp"

namespace tokenfeed {

namespace fs = std::filesystem;

ShardChecksums checksum_shard(const fs::path& shard_dir) {
  ShardChecksums sums;
  std::error_code ec;
  for (const char* name : kChecksummedFiles) {
    const fs::path file = shard_dir / name;
    if (fs::is_regular_file(file, ec)) sums[name] = sha256_file_hex(file);
  }
  return sums;
}

ShardChecksums checksum_stream_split(const fs::path& split_dir) {
  ShardChecksums sums;
  std::error_code ec;
  for (fs::directory_iterator it(split_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) sums[it->path().filename().string()] = sha256_file_hex(it->path());
  }
  return sums;
}

void record_content_checksums(const fs::path& dataset_dir, const std::string& split,
                              const ContentChecksums& checksums) {
  using ordered_json = nlohmann::ordered_json;
  ordered_json doc = read_dataset_metadata_document(dataset_dir);
  ordered_json& all = doc["content_sha256"];
  if (!all.is_object()) all = ordered_json::object();
  for (auto it = all.begin(); it != all.end();) {
    const std::string& key = it.key();
    it = key == split || key.starts_with(split + "/") ? all.erase(it) : std::next(it);
  }
  for (const auto& [shard, files] : checksums) {
    ordered_json entry = ordered_json::object();
    for (const auto& [file, hex] : files) entry[file] = hex;
    all[shard] = entry;
  }
  write_metadata_document(dataset_dir, std::move(doc));
}

}  // namespace tokenfeed
