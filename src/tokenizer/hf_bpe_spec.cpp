#include "tokenizer/hf_bpe_spec.hpp"

#include <limits>

#include "util/bounded_json.hpp"
#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

using nlohmann::json;

[[noreturn]] void unsupported(const std::string& what, const std::string& feature) {
  throw Error(ErrorKind::config, what + ": " + feature + " is not supported by the native encoder");
}

[[noreturn]] void malformed(const std::string& what, const std::string& member, const std::string& expected) {
  throw Error(ErrorKind::format, what + ": " + member + " is not " + expected);
}

std::string type_of(const json& node, const std::string& what, const std::string& path) {
  if (!node.is_object() || !node.contains("type") || !node["type"].is_string()) {
    malformed(what, path, "an object with a string \"type\"");
  }
  return node["type"].get<std::string>();
}

bool flag(const json& node, const char* key, bool fallback, const std::string& what, const std::string& path) {
  if (!node.contains(key) || node[key].is_null()) return fallback;
  if (!node[key].is_boolean()) malformed(what, path + "." + key, "a boolean");
  return node[key].get<bool>();
}

bool read_normalizer(const json& node, const std::string& what, const std::string& path) {
  if (node.is_null()) return false;
  const std::string type = type_of(node, what, path);
  if (type == "NFC") return true;
  if (type == "Sequence" && node.contains("normalizers") && node["normalizers"].is_array()) {
    bool nfc = false;
    for (std::size_t i = 0; i < node["normalizers"].size(); ++i) {
      nfc = read_normalizer(node["normalizers"][i], what, path + ".normalizers[" + std::to_string(i) + "]") || nfc;
    }
    return nfc;
  }
  unsupported(what, path + " of type '" + type + "'");
}

SplitBehavior read_behavior(const json& node, const std::string& what, const std::string& path) {
  if (!node.contains("behavior") || !node["behavior"].is_string()) malformed(what, path + ".behavior", "a string");
  const std::string b = node["behavior"].get<std::string>();
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  unsupported(what, "split behavior '" + b + "' at " + path);
}

PreTokenizerStep read_split(const json& node, const std::string& what, const std::string& path) {
  PreTokenizerStep step;
  const json& pattern = node.contains("pattern") ? node["pattern"] : json();
  if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
    step.pattern = pattern["Regex"].get<std::string>();
  } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
    step.pattern = pattern["String"].get<std::string>();
    step.literal = true;
  } else {
    malformed(what, path + ".pattern", "{\"Regex\": ...} or {\"String\": ...}");
  }
  step.behavior = read_behavior(node, what, path);
  step.invert = flag(node, "invert", false, what, path);
  return step;
}

// ByteLevel, last: the optional prefix space, then (use_regex) GPT-2's pattern, isolated.
void read_byte_level(const json& node, const std::string& what, const std::string& path,
                     std::vector<PreTokenizerStep>& steps) {
  if (flag(node, "add_prefix_space", true, what, path)) {
    PreTokenizerStep prefix;
    prefix.kind = PreTokenizerStep::Kind::prefix_space;
    steps.push_back(prefix);
  }
  if (flag(node, "use_regex", true, what, path)) {
    PreTokenizerStep split;
    split.pattern = std::string(kGpt2Pattern);
    steps.push_back(split);
  }
}

std::vector<PreTokenizerStep> read_pre_tokenizer(const json& node, const std::string& what) {
  if (node.is_null()) unsupported(what, "a missing pre_tokenizer (a byte-level BPE needs ByteLevel)");
  const std::string type = type_of(node, what, "pre_tokenizer");
  std::vector<PreTokenizerStep> steps;
  if (type == "ByteLevel") {
    read_byte_level(node, what, "pre_tokenizer", steps);
    return steps;
  }
  if (type != "Sequence" || !node.contains("pretokenizers") || !node["pretokenizers"].is_array()) {
    unsupported(what, "pre_tokenizer of type '" + type + "'");
  }
  const json& list = node["pretokenizers"];
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]";
    const std::string t = type_of(list[i], what, path);
    const bool last = i + 1 == list.size();
    if (t == "Split") {
      if (last) unsupported(what, "a pre_tokenizer Sequence that does not end with ByteLevel");
      steps.push_back(read_split(list[i], what, path));
    } else if (t == "ByteLevel" && last) {
      read_byte_level(list[i], what, path, steps);
    } else {
      unsupported(what, "pre-tokenizer " + path + " of type '" + t + "'" + (t == "ByteLevel" ? " before the end" : ""));
    }
  }
  if (list.empty()) unsupported(what, "an empty pre_tokenizer Sequence");
  return steps;
}

void check_post_processor(const json& node, const std::string& what, const std::string& path) {
  if (node.is_null()) return;
  const std::string type = type_of(node, what, path);
  if (type == "ByteLevel" || type == "TemplateProcessing") return;  // ids unchanged without special tokens
  if (type == "Sequence" && node.contains("processors") && node["processors"].is_array()) {
    for (std::size_t i = 0; i < node["processors"].size(); ++i) {
      check_post_processor(node["processors"][i], what, path + ".processors[" + std::to_string(i) + "]");
    }
    return;
  }
  unsupported(what, path + " of type '" + type + "'");
}

void check_model_options(const json& model, const std::string& what) {
  if (model.contains("type") && !(model["type"].is_string() && model["type"] == "BPE")) {
    unsupported(what, "model of type " + model["type"].dump());
  }
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
    unsupported(what, "model.dropout " + model["dropout"].dump());
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() && !(model[key].is_string() && model[key] == "")) {
      unsupported(what, std::string("model.") + key + " " + model[key].dump());
    }
  }
  if (flag(model, "byte_fallback", false, what, "model")) unsupported(what, "model.byte_fallback true");
}

std::uint32_t read_id(const json& v, const std::string& what, const std::string& path) {
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() >= std::numeric_limits<std::uint32_t>::max() - 8) {
    malformed(what, path, "a token id");
  }
  return v.get<std::uint32_t>();
}

void read_model(const json& model, const std::string& what, HfBpeSpec& spec) {
  if (!model.is_object()) malformed(what, "model", "an object");
  check_model_options(model, what);
  spec.ignore_merges = flag(model, "ignore_merges", false, what, "model");
  if (!model.contains("vocab") || !model["vocab"].is_object()) malformed(what, "model.vocab", "an object");
  for (const auto& [token, id] : model["vocab"].items())
    spec.vocab.emplace_back(token, read_id(id, what, "model.vocab"));
  if (!model.contains("merges") || !model["merges"].is_array()) malformed(what, "model.merges", "an array");
  for (const json& m : model["merges"]) {
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const std::size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        malformed(what, "merge " + m.dump(), "two tokens separated by a space");
      }
      spec.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      malformed(what, "merge " + m.dump().substr(0, 80), "a string or a pair of strings");
    }
  }
}

void read_added_tokens(const json& list, const std::string& what, HfBpeSpec& spec) {
  if (list.is_null()) return;
  if (!list.is_array()) malformed(what, "added_tokens", "an array");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    const json& t = list[i];
    if (!t.is_object() || !t.contains("content") || !t["content"].is_string() || t["content"] == "") {
      malformed(what, path + ".content", "a non-empty string");
    }
    HfAddedToken a;
    a.id = read_id(t.contains("id") ? t["id"] : json(), what, path + ".id");
    a.content = t["content"].get<std::string>();
    a.single_word = flag(t, "single_word", false, what, path);
    a.lstrip = flag(t, "lstrip", false, what, path);
    a.rstrip = flag(t, "rstrip", false, what, path);
    a.normalized = flag(t, "normalized", true, what, path);
    a.special = flag(t, "special", false, what, path);
    spec.added_tokens.push_back(std::move(a));
  }
}

// The encoder's tables are indexed by id: an id far beyond the number of tokens the file
// lists (a vocabulary with a hole of millions) would cost their memory for nothing.
void check_id_range(const HfBpeSpec& spec, const std::string& what) {
  const std::uint64_t listed = spec.vocab.size() + spec.added_tokens.size();
  const std::uint64_t bound = listed + kMaxIdGap;
  const auto check = [&](std::uint32_t id) {
    if (id >= bound) {
      unsupported(what, "token id " + std::to_string(id) + " (more than " + std::to_string(kMaxIdGap) + " beyond the " +
                            std::to_string(listed) + " tokens listed)");
    }
  };
  for (const auto& [token, id] : spec.vocab) check(id);
  for (const HfAddedToken& t : spec.added_tokens) check(t.id);
}

}  // namespace

HfBpeSpec read_hf_bpe_spec(std::string_view json_text, const std::string& what) {
  json root;
  try {
    root = parse_bounded_json(json_text);
  } catch (const JsonParseError& e) {
    throw Error(ErrorKind::format, what + ": invalid JSON: " + e.what());
  }
  if (!root.is_object()) malformed(what, "the document", "an object");
  for (const char* key : {"truncation", "padding"}) {
    if (root.contains(key) && !root[key].is_null()) unsupported(what, std::string(key) + " (it changes the ids)");
  }
  HfBpeSpec spec;
  spec.nfc = read_normalizer(root.value("normalizer", json()), what, "normalizer");
  spec.steps = read_pre_tokenizer(root.value("pre_tokenizer", json()), what);
  check_post_processor(root.value("post_processor", json()), what, "post_processor");
  const json decoder = root.value("decoder", json());
  if (!decoder.is_null() && type_of(decoder, what, "decoder") != "ByteLevel") {
    unsupported(what, "decoder of type '" + decoder["type"].get<std::string>() + "'");
  }
  if (!root.contains("model")) malformed(what, "model", "present");
  read_model(root["model"], what, spec);
  read_added_tokens(root.value("added_tokens", json()), what, spec);
  check_id_range(spec, what);
  return spec;
}

}  // namespace tokenfeed
