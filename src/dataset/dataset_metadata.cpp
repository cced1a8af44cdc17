#include "dataset/dataset_metadata.hpp"

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "io/regular_file.hpp"
#include "io/staging_dir.hpp"
#include "tokenfeed/error.hpp"
#include "util/bounded_json.hpp"

namespace tokenfeed {
namespace {

using nlohmann::json;

std::optional<std::int64_t> read_id(const json& doc, const char* field, const std::string& file) {
  if (!doc.contains(field) || doc[field].is_null()) return std::nullopt;
  const json& v = doc[field];
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 0xffffffffLL) {
    throw Error(ErrorKind::format,
                file + ": field '" + field + "' must be a non-negative 32-bit integer, got " + quote_json(v));
  }
  return v.get<std::int64_t>();
}

}  // namespace

DatasetMetadata read_dataset_metadata(const std::filesystem::path& dataset_dir) {
  refuse_staging_dir(dataset_dir);
  DatasetMetadata meta;
  const std::filesystem::path path = dataset_dir / "dataset_metadata.json";
  if (!std::filesystem::exists(path)) return meta;
  const std::string file = path.string();
  const std::string text = read_regular_file(path, "dataset metadata");
  json doc;
  try {
    doc = parse_bounded_json(text);
  } catch (const JsonParseError& e) {
    throw Error(ErrorKind::format, file + ": invalid JSON: " + e.what());
  }
  if (!doc.is_object()) throw Error(ErrorKind::format, file + ": expected a JSON object at the top level");
  meta.present = true;

  if (doc.contains("token_dtype") && !doc["token_dtype"].is_null()) {
    const json& v = doc["token_dtype"];
    if (!v.is_string() || !parse_token_dtype(v.get<std::string>())) {
      throw Error(ErrorKind::format,
                  file + ": field 'token_dtype' must be \"uint16\" or \"uint32\", got " + quote_json(v));
    }
    meta.token_dtype = parse_token_dtype(v.get<std::string>());
  }
  if (doc.contains("mask_dtype") && !doc["mask_dtype"].is_null()) {
    const json& v = doc["mask_dtype"];
    if (!v.is_string() || !parse_mask_dtype(v.get<std::string>())) {
      throw Error(ErrorKind::format,
                  file + ": field 'mask_dtype' must be \"uint8\" or \"float32\", got " + quote_json(v));
    }
    meta.mask_dtype = parse_mask_dtype(v.get<std::string>());
  }
  meta.eot_token_id = read_id(doc, "eot_token_id", file);
  meta.eos_token_id = read_id(doc, "eos_token_id", file);
  meta.pad_token_id = read_id(doc, "pad_token_id", file);
  meta.vocab_size = read_id(doc, "vocab_size", file);

  if (doc.contains("special_tokens") && !doc["special_tokens"].is_null()) {
    const json& st = doc["special_tokens"];
    if (!st.is_object()) throw Error(ErrorKind::format, file + ": field 'special_tokens' must be an object");
    SpecialTokenIds ids;
    const auto get = [&](const char* role, std::uint32_t& out) {
      const auto v = read_id(st, role, file + " special_tokens");
      if (!v) throw Error(ErrorKind::format, file + ": field 'special_tokens' lacks '" + role + "'");
      out = static_cast<std::uint32_t>(*v);
    };
    get("system", ids.system);
    get("user", ids.user);
    get("assistant", ids.assistant);
    get("eot", ids.eot);
    if (st.contains("tool") && !st["tool"].is_null()) {
      std::uint32_t tool = 0;
      get("tool", tool);
      ids.tool = tool;
    }
    meta.special_tokens = ids;
  }
  if (doc.contains("content_sha256") && !doc["content_sha256"].is_null()) {
    const json& all = doc["content_sha256"];
    const auto bad = [&](const std::string& what) {
      throw Error(ErrorKind::format, file + ": field 'content_sha256' " + what);
    };
    if (!all.is_object()) bad("must be an object of shards");
    for (const auto& [shard, files] : all.items()) {
      if (!files.is_object()) bad("entry " + quote_json(json(shard)) + " must be an object of files");
      auto& recorded = meta.content_sha256[shard];
      for (const auto& [name, hex] : files.items()) {
        const bool ok = hex.is_string() && hex.get_ref<const std::string&>().size() == 64 &&
                        hex.get_ref<const std::string&>().find_first_not_of("0123456789abcdef") == std::string::npos;
        if (!ok)
          bad("entry " + quote_json(json(shard + "/" + name)) + " must be 64 lowercase hex digits, got " +
              quote_json(hex));
        recorded[name] = hex.get<std::string>();
      }
    }
  }
  return meta;
}

}  // namespace tokenfeed
