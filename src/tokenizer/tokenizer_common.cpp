#include <array>
#include <string>

#include "tokenizer/special_strings.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed {

Tokenizer::Tokenizer(SpecialTokenStrings strings, SpecialTokenIds ids, std::uint32_t vocab_size)
    : special_strings_(std::move(strings)), special_ids_(ids), vocab_size_(vocab_size) {}

Tokenizer::~Tokenizer() = default;

std::vector<std::uint32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<std::uint32_t> ids;
  do_encode(text, ids);
  return ids;
}

std::optional<std::uint32_t> Tokenizer::token_id(std::string_view token) const {
  if (token == special_strings_.system) return special_ids_.system;
  if (token == special_strings_.user) return special_ids_.user;
  if (token == special_strings_.assistant) return special_ids_.assistant;
  if (token == special_strings_.tool && special_ids_.tool) return *special_ids_.tool;
  if (token == special_strings_.eot) return special_ids_.eot;
  return do_piece_id(token);
}

std::optional<std::uint32_t> Tokenizer::do_piece_id(std::string_view /*piece*/) const { return std::nullopt; }
std::optional<std::uint32_t> Tokenizer::model_eos_id() const noexcept { return std::nullopt; }
std::optional<std::uint32_t> Tokenizer::model_bos_id() const noexcept { return std::nullopt; }

const std::string* Tokenizer::special_string(std::uint32_t id) const noexcept {
  if (id == special_ids_.system) return &special_strings_.system;
  if (id == special_ids_.user) return &special_strings_.user;
  if (id == special_ids_.assistant) return &special_strings_.assistant;
  if (special_ids_.tool && id == *special_ids_.tool) return &special_strings_.tool;
  if (id == special_ids_.eot) return &special_strings_.eot;
  return nullptr;
}

std::vector<SpecialTokenInfo> Tokenizer::special_token_infos(const std::array<SpecialTokenSource, 5>& sources) const {
  return {
      {"system", special_strings_.system, special_ids_.system, sources[0]},
      {"user", special_strings_.user, special_ids_.user, sources[1]},
      {"assistant", special_strings_.assistant, special_ids_.assistant, sources[2]},
      {"tool", special_strings_.tool, special_ids_.tool.value_or(0), sources[3]},
      {"eot", special_strings_.eot, special_ids_.eot, sources[4]},
  };
}

void check_special_token_strings(const SpecialTokenStrings& strings, std::string_view what) {
  const std::array<std::pair<const char*, const std::string*>, 5> all = {{{"system", &strings.system},
                                                                          {"user", &strings.user},
                                                                          {"assistant", &strings.assistant},
                                                                          {"tool", &strings.tool},
                                                                          {"eot", &strings.eot}}};
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (all[i].second->empty()) {
      throw Error(ErrorKind::config, std::string(what) + ": the " + all[i].first + " special token string is empty");
    }
    for (std::size_t j = i + 1; j < all.size(); ++j) {
      if (*all[i].second == *all[j].second) {
        throw Error(ErrorKind::config, std::string(what) + ": the " + all[i].first + " and " + all[j].first +
                                           " special tokens have the same string '" + *all[i].second + "'");
      }
    }
  }
}

void throw_undecodable_id(std::string_view what, std::uint32_t id, std::uint32_t vocab_size) {
  throw Error(ErrorKind::format, std::string(what) + ": cannot decode id " + std::to_string(id) +
                                     " (the vocabulary size is " + std::to_string(vocab_size) + ")");
}

ResolvedSpecials resolve_specials(const SpecialTokenStrings& strings, std::uint32_t base,
                                  const std::function<std::optional<std::uint32_t>(const std::string&)>& model_id) {
  ResolvedSpecials r;
  std::uint32_t next = base;
  const auto resolve = [&](const std::string& text, SpecialTokenSource& source) -> std::uint32_t {
    if (const std::optional<std::uint32_t> id = model_id(text)) {
      source = SpecialTokenSource::model;
      return *id;
    }
    source = SpecialTokenSource::appended;
    return next++;
  };
  r.ids.system = resolve(strings.system, r.sources[0]);
  r.ids.user = resolve(strings.user, r.sources[1]);
  r.ids.assistant = resolve(strings.assistant, r.sources[2]);
  r.ids.tool = resolve(strings.tool, r.sources[3]);
  r.ids.eot = resolve(strings.eot, r.sources[4]);
  r.vocab_size = next;
  return r;
}

const char* to_string(SpecialTokenSource source) noexcept {
  return source == SpecialTokenSource::model ? "model" : "appended";
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view spec, const SpecialTokenStrings& strings) {
  if (spec == "bytes") return make_bytes_tokenizer(strings);
  // The tokenizers read from a file: "PREFIX:PATH".
  struct FileTokenizer {
    std::string_view prefix;
    std::string_view needs;  // what the error says a PATH is
    std::unique_ptr<Tokenizer> (*make)(const std::filesystem::path&, const SpecialTokenStrings&);
  };
  static constexpr FileTokenizer kFileTokenizers[] = {
      {"sentencepiece:", "a model file: sentencepiece:PATH/TO/MODEL", &make_sentencepiece_tokenizer},
      {"hf-bpe:", "a tokenizer.json: hf-bpe:PATH/TO/tokenizer.json", &make_hf_bpe_tokenizer},
  };
  for (const FileTokenizer& t : kFileTokenizers) {
    if (!spec.starts_with(t.prefix)) continue;
    const std::string_view file = spec.substr(t.prefix.size());
    if (file.empty()) {
      throw Error(ErrorKind::config, "tokenizer '" + std::string(t.prefix) + "' needs " + std::string(t.needs));
    }
    return t.make(std::filesystem::path(file), strings);
  }
  throw Error(ErrorKind::config, "unknown tokenizer '" + std::string(spec) +
                                     "' (expected 'bytes', 'sentencepiece:MODEL' or 'hf-bpe:TOKENIZER_JSON')");
}

}  // namespace tokenfeed
