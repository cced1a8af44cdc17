// The "hf-bpe:TOKENIZER_JSON" tokenizer: a Hugging Face byte-level BPE tokenizer.json encoded
// natively, giving the ids of `tokenizers`' encode(text, add_special_tokens=False). The
// steps are that package's: added tokens that match the original text are split out; each
// remaining piece is normalized (NFC), then split on the added tokens that match normalized
// text; each remaining piece goes through the pre-tokenizer's steps, and each resulting
// piece's bytes through the BPE model.
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/regular_file.hpp"
#include "tokenizer/byte_level_bpe.hpp"
#include "tokenizer/hf_bpe_spec.hpp"
#include "tokenizer/pcre2_regex.hpp"
#include "tokenizer/special_strings.hpp"
#include "tokenizer/unicode_text.hpp"
#include "util/bounded_json.hpp"
#include "util/sha256.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace tokenfeed {
namespace {

constexpr std::size_t kMaxTokenizerJsonBytes = std::size_t{1} << 30;

// The added tokens of one kind (matched in original or in normalized text), found as
// `tokenizers` finds them: leftmost-longest, non-overlapping (a match that single_word
// discards still consumes its text), then lstrip and rstrip widen a kept match over white
// space.
class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<HfAddedToken> tokens) : tokens_(std::move(tokens)) {
    std::sort(tokens_.begin(), tokens_.end(),
              [](const HfAddedToken& a, const HfAddedToken& b) { return a.content.size() > b.content.size(); });
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      by_first_[static_cast<unsigned char>(tokens_[i].content[0])].push_back(i);
    }
  }
  bool empty() const noexcept { return tokens_.empty(); }

  // Calls on_text(piece) for each non-empty stretch between kept matches and on_token(id) for
  // each kept match, in order.
  template <class OnText, class OnToken>
  void split(std::string_view text, OnText&& on_text, OnToken&& on_token) const {
    std::size_t start_offset = 0;
    std::size_t pos = 0;
    while (const HfAddedToken* token = next_match(text, pos)) {
      std::size_t start = pos;
      std::size_t stop = pos + token->content.size();
      pos = stop;
      if (token->single_word && !is_single_word(text, start, stop)) continue;
      if (token->lstrip) start = std::max(white_space_run_start(text, start), start_offset);
      if (token->rstrip) stop = white_space_run_end(text, stop);
      if (start_offset < start) on_text(text.substr(start_offset, start - start_offset));
      on_token(token->id);
      start_offset = stop;
    }
    if (start_offset < text.size()) on_text(text.substr(start_offset));
  }

 private:
  // The longest token at the leftmost position >= pos where one matches; pos moves there.
  const HfAddedToken* next_match(std::string_view text, std::size_t& pos) const {
    for (std::size_t i = pos; i < text.size(); ++i) {
      for (const std::size_t k : by_first_[static_cast<unsigned char>(text[i])]) {
        if (text.substr(i).starts_with(tokens_[k].content)) {
          pos = i;
          return &tokens_[k];
        }
      }
    }
    return nullptr;
  }
  static bool is_single_word(std::string_view text, std::size_t start, std::size_t stop) {
    if (start > 0) {
      std::size_t p = previous_code_point_start(text, start);
      if (is_word_code_point(next_code_point(text, p))) return false;
    }
    if (stop < text.size()) {
      std::size_t p = stop;
      if (is_word_code_point(next_code_point(text, p))) return false;
    }
    return true;
  }
  static std::size_t white_space_run_start(std::string_view text, std::size_t end) {
    while (end > 0) {
      std::size_t p = previous_code_point_start(text, end);
      const std::size_t begin = p;
      if (!is_white_space(next_code_point(text, p))) break;
      end = begin;
    }
    return end;
  }
  static std::size_t white_space_run_end(std::string_view text, std::size_t begin) {
    while (begin < text.size()) {
      std::size_t p = begin;
      if (!is_white_space(next_code_point(text, p))) break;
      begin = p;
    }
    return begin;
  }

  std::vector<HfAddedToken> tokens_;  // longest first
  std::array<std::vector<std::size_t>, 256> by_first_;
};

struct CompiledStep {
  PreTokenizerStep step;
  std::unique_ptr<Pcre2Regex> regex;  // split steps
};

// The [begin, end) pieces a split step keeps, as NormalizedString::split makes them.
void split_pieces(const std::vector<std::pair<std::size_t, std::size_t>>& matches, std::size_t size,
                  const PreTokenizerStep& step, std::vector<std::pair<std::size_t, std::size_t>>& out) {
  struct Segment {
    std::size_t begin, end;
    bool match;
  };
  std::vector<Segment> segments;
  std::size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) segments.push_back({prev, b, step.invert});
    segments.push_back({b, e, !step.invert});
    prev = e;
  }
  if (prev != size) segments.push_back({prev, size, step.invert});
  std::vector<Segment> kept;
  bool previous = false;
  const auto fold = [&](const Segment& s, bool merge, bool at_front) {
    if (merge && !kept.empty()) {
      (at_front ? kept.back().begin : kept.back().end) = at_front ? s.begin : s.end;
    } else {
      kept.push_back({s.begin, s.end, false});
    }
  };
  switch (step.behavior) {
    case SplitBehavior::isolated:
      kept = segments;
      break;
    case SplitBehavior::removed:
      for (const Segment& s : segments)
        if (!s.match) kept.push_back(s);
      break;
    case SplitBehavior::contiguous:
      for (const Segment& s : segments) fold(s, s.match == previous, false), previous = s.match;
      break;
    case SplitBehavior::merged_with_previous:
      for (const Segment& s : segments) fold(s, s.match && !previous, false), previous = s.match;
      break;
    case SplitBehavior::merged_with_next:
      for (auto it = segments.rbegin(); it != segments.rend(); ++it)
        fold(*it, it->match && !previous, true), previous = it->match;
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Segment& s : kept) {
    if (s.end > s.begin) out.emplace_back(s.begin, s.end);
  }
}

class HfBpeTokenizer final : public Tokenizer {
 public:
  struct Parts {
    std::vector<std::string> id_bytes;  // decode: each id's bytes
    std::vector<std::string> id_token;  // each id's token text as written (empty: none)
    std::uint32_t base_vocab_size = 0;
    std::array<SpecialTokenSource, 5> sources{};
    SpecialTokenIds special_ids;
    std::uint32_t vocab_size = 0;
    std::optional<std::uint32_t> eos, bos;  // tokenizer_config.json's eos_token, bos_token
  };

  HfBpeTokenizer(const SpecialTokenStrings& strings, Parts parts, HfBpeSpec& spec, std::unique_ptr<ByteLevelBpe> bpe,
                 std::filesystem::path path, std::string sha256, const std::string& what)
      : Tokenizer(strings, parts.special_ids, parts.vocab_size),
        parts_(std::move(parts)),
        nfc_(spec.nfc),
        original_(select_added(spec, false)),
        normalized_(select_added(spec, true)),
        bpe_(std::move(bpe)),
        path_(std::move(path)),
        sha256_(std::move(sha256)) {
    for (std::size_t i = 0; i < spec.steps.size(); ++i) {
      CompiledStep c{spec.steps[i], nullptr};
      if (c.step.kind == PreTokenizerStep::Kind::split) {
        c.regex = std::make_unique<Pcre2Regex>(c.step.pattern, c.step.literal,
                                               what + ": pre-tokenizer step " + std::to_string(i));
      }
      steps_.push_back(std::move(c));
    }
    for (std::uint32_t id = 0; id < parts_.id_token.size(); ++id) {
      if (!parts_.id_token[id].empty()) token_ids_.emplace(parts_.id_token[id], id);
    }
  }

  TokenizerDescription describe() const override {
    TokenizerDescription d;
    d.kind = "hf-bpe";
    d.model_path = path_;
    d.model_sha256 = sha256_;
    d.base_vocab_size = parts_.base_vocab_size;
    d.vocab_size = vocab_size();
    d.special_tokens = special_token_infos(parts_.sources);
    return d;
  }

  std::optional<std::uint32_t> model_eos_id() const noexcept override { return parts_.eos; }
  std::optional<std::uint32_t> model_bos_id() const noexcept override { return parts_.bos; }

 protected:
  std::optional<std::uint32_t> do_piece_id(std::string_view piece) const override {
    const auto it = token_ids_.find(std::string(piece));
    if (it == token_ids_.end()) return std::nullopt;
    return it->second;
  }

  void do_encode(std::string_view text, std::vector<std::uint32_t>& out) const override {
    std::size_t bad = 0;
    if (!valid_utf8(text, bad)) {
      throw Error(ErrorKind::format,
                  "hf-bpe tokenizer: the text is not valid UTF-8 (byte " + std::to_string(bad) + ")");
    }
    const auto on_token = [&](std::uint32_t id) { out.push_back(id); };
    const auto on_normalized = [&](std::string_view piece) { pre_tokenize(piece, 0, out); };
    const auto on_original = [&](std::string_view piece) {
      if (!nfc_) {
        normalized_.split(piece, on_normalized, on_token);
        return;
      }
      const std::string normalized = nfc(piece);
      normalized_.split(normalized, on_normalized, on_token);
    };
    original_.split(text, on_original, on_token);
  }

  std::string do_decode(std::span<const std::uint32_t> ids) const override {
    std::string text;
    for (const std::uint32_t id : ids) {
      if (id < parts_.id_bytes.size() && !parts_.id_token[id].empty()) {
        text += parts_.id_bytes[id];
      } else if (const std::string* special = special_string(id)) {
        text += *special;
      } else {
        throw_undecodable_id("hf-bpe tokenizer", id, vocab_size());
      }
    }
    return text;
  }

 private:
  static std::vector<HfAddedToken> select_added(HfBpeSpec& spec, bool normalized) {
    std::vector<HfAddedToken> out;
    for (const HfAddedToken& t : spec.added_tokens) {
      if (t.normalized != normalized) continue;
      out.push_back(t);
      if (normalized && spec.nfc) out.back().content = nfc(t.content);
    }
    return out;
  }

  void pre_tokenize(std::string_view piece, std::size_t step, std::vector<std::uint32_t>& out) const {
    if (piece.empty()) return;
    if (step == steps_.size()) {
      bpe_->encode(piece, out);
      return;
    }
    const CompiledStep& s = steps_[step];
    if (s.step.kind == PreTokenizerStep::Kind::prefix_space) {
      if (piece.front() == ' ') {
        pre_tokenize(piece, step + 1, out);
      } else {
        const std::string spaced = " " + std::string(piece);
        pre_tokenize(spaced, step + 1, out);
      }
      return;
    }
    std::vector<std::pair<std::size_t, std::size_t>> matches;
    s.regex->find_all(piece, matches);
    if (s.step.behavior == SplitBehavior::isolated && !s.step.invert) {
      std::size_t prev = 0;
      for (const auto& [b, e] : matches) {
        if (prev != b) pre_tokenize(piece.substr(prev, b - prev), step + 1, out);
        pre_tokenize(piece.substr(b, e - b), step + 1, out);
        prev = e;
      }
      if (prev != piece.size()) pre_tokenize(piece.substr(prev), step + 1, out);
      return;
    }
    std::vector<std::pair<std::size_t, std::size_t>> pieces;
    split_pieces(matches, piece.size(), s.step, pieces);
    for (const auto& [b, e] : pieces) pre_tokenize(piece.substr(b, e - b), step + 1, out);
  }

  Parts parts_;
  bool nfc_;
  AddedTokenMatcher original_;
  AddedTokenMatcher normalized_;
  std::vector<CompiledStep> steps_;
  std::unique_ptr<ByteLevelBpe> bpe_;
  std::unordered_map<std::string, std::uint32_t> token_ids_;
  std::filesystem::path path_;
  std::string sha256_;
};

// Ids: the vocabulary's and the added tokens' (an added token may reuse a vocabulary id).
HfBpeTokenizer::Parts make_parts(const HfBpeSpec& spec, const SpecialTokenStrings& strings, const std::string& what) {
  HfBpeTokenizer::Parts p;
  std::uint32_t end = 0;
  for (const auto& [token, id] : spec.vocab) end = std::max(end, id + 1);
  p.base_vocab_size = end;
  for (const HfAddedToken& t : spec.added_tokens) end = std::max(end, t.id + 1);
  p.id_bytes.resize(end);
  p.id_token.resize(end);
  for (const auto& [token, id] : spec.vocab) {
    if (!p.id_token[id].empty()) throw Error(ErrorKind::format, what + ": id " + std::to_string(id) + " appears twice");
    p.id_token[id] = token;
    p.id_bytes[id] = byte_level_to_bytes(token).value_or(token);
  }
  std::unordered_map<std::string, std::uint32_t> added;
  for (const HfAddedToken& t : spec.added_tokens) {
    p.id_token[t.id] = t.content;
    p.id_bytes[t.id] = byte_level_to_bytes(t.content).value_or(t.content);  // as the ByteLevel decoder does
    added.emplace(t.content, t.id);
  }
  const ResolvedSpecials specials =
      resolve_specials(strings, end, [&](const std::string& text) -> std::optional<std::uint32_t> {
        if (const auto it = added.find(text); it != added.end()) return it->second;
        return std::nullopt;
      });
  p.special_ids = specials.ids;
  p.sources = specials.sources;
  p.vocab_size = specials.vocab_size;
  return p;
}

// The text of tokenizer_config.json's `key` (a string, or an added token's {"content": ...}).
std::optional<std::string> config_token(const nlohmann::json& config, const char* key) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const nlohmann::json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// The end- and beginning-of-sequence ids that tokenizer_config.json beside the file names, as
// the Python package's --hf-tokenizer takes them; none when there is no such file or token.
void read_model_eos_bos(const std::filesystem::path& json_path, const std::vector<std::string>& id_token,
                        HfBpeTokenizer::Parts& p) {
  const std::filesystem::path config_path = json_path.parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config_path, ec)) return;
  nlohmann::json config;
  try {
    config = parse_bounded_json(read_regular_file(config_path, "tokenizer_config.json"));
  } catch (const JsonParseError& e) {
    throw Error(ErrorKind::format, "'" + config_path.string() + "': invalid JSON: " + e.what());
  }
  const auto id_of = [&](const std::optional<std::string>& text) -> std::optional<std::uint32_t> {
    if (!text) return std::nullopt;
    for (std::uint32_t id = 0; id < id_token.size(); ++id) {
      if (id_token[id] == *text) return id;
    }
    return std::nullopt;
  };
  p.eos = id_of(config_token(config, "eos_token"));
  p.bos = id_of(config_token(config, "bos_token"));
}

std::filesystem::path tokenizer_json_path(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return path / "tokenizer.json";
  return path;
}

}  // namespace

std::unique_ptr<Tokenizer> make_hf_bpe_tokenizer(const std::filesystem::path& tokenizer_json,
                                                 const SpecialTokenStrings& strings) {
  check_special_token_strings(strings, "hf-bpe tokenizer");
  const std::filesystem::path path = tokenizer_json_path(tokenizer_json);
  const std::string what = "tokenizer '" + path.string() + "'";
  const std::string text = read_regular_file(path, "tokenizer.json", kMaxTokenizerJsonBytes);
  HfBpeSpec spec = read_hf_bpe_spec(text, what);
  BytesToId byte_vocab;
  for (const auto& [token, id] : spec.vocab) {
    if (auto bytes = byte_level_to_bytes(token)) byte_vocab.emplace(std::move(*bytes), id);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(spec.merges.size());
  for (const auto& [left, right] : spec.merges) {
    auto l = byte_level_to_bytes(left);
    auto r = byte_level_to_bytes(right);
    if (!l || !r) {
      throw Error(ErrorKind::config, what + ": merge '" + left + " " + right +
                                         "' is not byte-level text (not supported by the native encoder)");
    }
    merges.emplace_back(std::move(*l), std::move(*r));
  }
  auto bpe = std::make_unique<ByteLevelBpe>(std::move(byte_vocab), merges, spec.ignore_merges, what);
  HfBpeTokenizer::Parts parts = make_parts(spec, strings, what);
  read_model_eos_bos(path, parts.id_token, parts);
  Sha256 sha;
  sha.update(text);
  return std::make_unique<HfBpeTokenizer>(strings, std::move(parts), spec, std::move(bpe), path,
                                          Sha256::hex(sha.finish()), what);
}

std::string hf_bpe_unsupported(const std::filesystem::path& tokenizer_json) {
  try {
    make_hf_bpe_tokenizer(tokenizer_json);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::config) return e.what();
    throw;
  }
  return {};
}

}  // namespace tokenfeed
