#include "dataset/content_checksum.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <system_error>

#include <nlohmann/json.hpp>

#include "util/sha256.hpp"
#include "io/regular_file.hpp"
#include "tokenfeed/error.hpp"
#include "util/bounded_json.hpp"

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

void record_content_checksums(const fs::path& dataset_dir, const std::string& split,
                              const ContentChecksums& checksums) {
  using ordered_json = nlohmann::ordered_json;
  const fs::path path = dataset_dir / "dataset_metadata.json";
  ordered_json doc = ordered_json::object();
  std::error_code ec;
  if (fs::exists(path, ec)) {
    const std::string text = read_regular_file(path, "dataset metadata");
    try {
      // Depth-checked first; then read keeping the field order.
      (void)parse_bounded_json(text);
      doc = ordered_json::parse(text);
    } catch (const JsonParseError& e) {
      throw Error(ErrorKind::format, path.string() + ": invalid JSON: " + e.what());
    }
    if (!doc.is_object()) throw Error(ErrorKind::format, path.string() + ": expected a JSON object at the top level");
  }
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
  const fs::path tmp = dataset_dir / (".dataset_metadata.json.tmp-" + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << doc.dump(2) << '\n';
    out.close();
    if (!out) {
      fs::remove(tmp, ec);
      throw Error(ErrorKind::io, "cannot write '" + tmp.string() + "'");
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error(ErrorKind::io, "cannot replace '" + path.string() + "': " + ec.message());
  }
}

}  // namespace tokenfeed
