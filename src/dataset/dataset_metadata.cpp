#include "dataset/dataset_metadata.hpp"

#include <unistd.h>

#include <fstream>
#include <string>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

#include "io/regular_file.hpp"
#include "io/staging_dir.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "tokenfeed/error.hpp"
#include "util/bounded_json.hpp"

namespace tokenfeed {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

std::optional<std::int64_t> read_id(const json& doc, const char* field, const std::string& file) {
  if (!doc.contains(field) || doc[field].is_null()) return std::nullopt;
  const json& v = doc[field];
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 0xffffffffLL) {
    throw Error(ErrorKind::format,
                file + ": field '" + field + "' must be a non-negative 32-bit integer, got " + quote_json(v));
  }
  return v.get<std::int64_t>();
}

// The fields of a metadata file's `text`, checked; `file` names it in errors.
DatasetMetadata parse_dataset_metadata(const std::string& text, const std::string& file) {
  DatasetMetadata meta;
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

}  // namespace

DatasetMetadata read_dataset_metadata(const fs::path& dataset_dir) {
  refuse_staging_dir(dataset_dir);
  const fs::path path = dataset_dir / "dataset_metadata.json";
  if (!fs::exists(path)) return DatasetMetadata{};
  return parse_dataset_metadata(read_regular_file(path, "dataset metadata"), path.string());
}

ordered_json read_dataset_metadata_document(const fs::path& dataset_dir) {
  const fs::path path = dataset_dir / "dataset_metadata.json";
  ordered_json doc = ordered_json::object();
  std::error_code ec;
  if (!fs::exists(path, ec)) return doc;
  const std::string text = read_regular_file(path, "dataset metadata");
  try {
    // Depth-checked first; then read keeping the field order.
    (void)parse_bounded_json(text);
    doc = ordered_json::parse(text);
  } catch (const JsonParseError& e) {
    throw Error(ErrorKind::format, path.string() + ": invalid JSON: " + e.what());
  }
  if (!doc.is_object()) throw Error(ErrorKind::format, path.string() + ": expected a JSON object at the top level");
  return doc;
}

ordered_json special_tokens_json(const SpecialTokenIds& s) {
  ordered_json j;
  j["system"] = s.system;
  j["user"] = s.user;
  j["assistant"] = s.assistant;
  if (s.tool) {
    j["tool"] = *s.tool;
  } else {
    j["tool"] = nullptr;
  }
  j["eot"] = s.eot;
  return j;
}

ordered_json dataset_metadata_fields(const DatasetMetadata& m, const ordered_json& special_tokens) {
  ordered_json j;
  j["format_version"] = 1;
  if (m.token_dtype) j["token_dtype"] = to_string(*m.token_dtype);
  if (m.mask_dtype) j["mask_dtype"] = to_string(*m.mask_dtype);
  for (const auto& [key, value] :
       {std::pair{"vocab_size", m.vocab_size}, std::pair{"eot_token_id", m.eot_token_id},
        std::pair{"eos_token_id", m.eos_token_id}, std::pair{"pad_token_id", m.pad_token_id}}) {
    if (value) j[key] = *value;
  }
  if (!special_tokens.is_null()) j["special_tokens"] = special_tokens;
  return j;
}

void write_metadata_document(const fs::path& dataset_dir, ordered_json doc, const ordered_json& extra,
                             const MetadataWriteOptions& options) {
  const fs::path path = dataset_dir / "dataset_metadata.json";
  if (!doc.is_object() || !extra.is_object()) {
    throw Error(ErrorKind::usage, path.string() + ": the metadata and its extra fields must be JSON objects");
  }
  std::error_code ec;
  fs::create_directories(dataset_dir, ec);
  if (ec) throw Error(ErrorKind::io, "cannot create '" + dataset_dir.string() + "': " + ec.message());
  if (options.keep_recorded_checksums && !doc.contains("content_sha256")) {
    // A file that cannot be read keeps nothing: it is about to be replaced.
    try {
      const ordered_json previous = read_dataset_metadata_document(dataset_dir);
      const auto it = previous.find("content_sha256");
      if (it != previous.end() && it->is_object()) doc["content_sha256"] = *it;
    } catch (const Error&) {
    }
  }
  for (const auto& [key, value] : extra.items()) doc[key] = value;
  const std::string text = doc.dump(2, ' ', options.ascii) + "\n";
  (void)parse_dataset_metadata(text, path.string());

  const fs::path tmp = dataset_dir / (".dataset_metadata.json.tmp-" + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
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

fs::path write_dataset_metadata(const fs::path& dataset_dir, const DatasetMetadataFields& fields) {
  const fs::path path = dataset_dir / "dataset_metadata.json";
  const auto parse = [&](const std::string& text, const char* what) {
    try {
      (void)parse_bounded_json(text);  // depth-checked first; then read keeping the field order
      return ordered_json::parse(text);
    } catch (const JsonParseError& e) {
      throw Error(ErrorKind::format, path.string() + ": " + what + " is not valid JSON: " + e.what());
    }
  };
  DatasetMetadata known;
  known.token_dtype = fields.token_dtype;
  known.mask_dtype = fields.mask_dtype;
  known.vocab_size = fields.vocab_size;
  known.eot_token_id = fields.eot_token_id;
  known.eos_token_id = fields.eos_token_id;
  known.pad_token_id = fields.pad_token_id;
  const ordered_json special =
      fields.special_tokens_json.empty() ? ordered_json() : parse(fields.special_tokens_json, "special_tokens");
  MetadataWriteOptions options;
  options.keep_recorded_checksums = fields.keep_recorded_checksums;
  options.ascii = fields.ascii;
  write_metadata_document(dataset_dir, dataset_metadata_fields(known, special), parse(fields.extra_json, "extra"),
                          options);
  return path;
}

}  // namespace tokenfeed
