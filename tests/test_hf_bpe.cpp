// The native byte-level BPE tokenizer (hf-bpe:TOKENIZER_JSON) on small hand-written files:
// merges by rank, ignore_merges, added tokens, decode, the identity hash and the refusal of
// features it cannot reproduce. Its exactness against the `tokenizers` package on a hard
// corpus is python/tests/test_hf_bpe_native.py's.
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace {

using namespace tokenfeed;
using Ids = std::vector<std::uint32_t>;
using nlohmann::json;

// GPT-2's byte-to-character map, written as UTF-8.
std::string mapped(unsigned char b) {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    unsigned next = 256;
    for (unsigned c = 0; c < 256; ++c) {
      const bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
      const unsigned cp = printable ? c : next++;
      t[c] = cp < 0x80 ? std::string(1, static_cast<char>(cp))
                       : std::string{static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    return t;
  }();
  return table[b];
}

std::string mapped(std::string_view bytes) {
  std::string out;
  for (const char c : bytes) out += mapped(static_cast<unsigned char>(c));
  return out;
}

// Bytes are ids 0..255 (id = byte); then the merges' results from 256 on, and "abc" (no merge).
json base_spec() {
  json vocab = json::object();
  for (unsigned b = 0; b < 256; ++b) vocab[mapped(static_cast<unsigned char>(b))] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {" ", "w"}};
  json merge_list = json::array();
  std::uint32_t id = 256;
  for (const auto& [a, b] : merges) {
    vocab[mapped(a + b)] = id++;
    merge_list.push_back(json::array({mapped(a), mapped(b)}));
  }
  vocab["abc"] = 400;
  return json{
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array({json{{"id", 500},
                                         {"content", "<|eot|>"},
                                         {"single_word", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"normalized", false},
                                         {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", merge_list}}}};
}

std::unique_ptr<Tokenizer> load(const test::TempDir& tmp, const json& spec, const char* name = "tokenizer.json") {
  const auto path = tmp.path() / name;
  std::ofstream(path) << spec.dump();
  return make_tokenizer("hf-bpe:" + path.string());
}

Ids bytes_of(std::string_view s) { return Ids(s.begin(), s.end()); }

}  // namespace

TEST_CASE("hf-bpe: merges apply by rank over GPT-2's pre-tokenizer pieces") {
  test::TempDir tmp;
  const auto tok = load(tmp, base_spec());
  CHECK(tok->encode("hello") == Ids{259});
  CHECK(tok->encode("hello world") == Ids{259, 260, 'o', 'r', 'l', 'd'});
  CHECK(tok->encode("hellohe") == Ids{259, 256});  // one piece: hell+o first, then he
  CHECK(tok->encode("abc") == bytes_of("abc"));    // in the vocabulary, but no merge makes it
  CHECK(tok->encode("") == Ids{});
  const std::string long_word(5000, 'l');  // the heap path: 2500 "ll"
  CHECK(tok->encode(long_word) == Ids(2500, 257));
  CHECK(tok->decode(tok->encode("hello world\xe2\x9c\x93")) == "hello world\xe2\x9c\x93");
}

TEST_CASE("hf-bpe: ignore_merges takes a whole piece from the vocabulary") {
  test::TempDir tmp;
  json spec = base_spec();
  spec["model"]["ignore_merges"] = true;
  CHECK(load(tmp, spec)->encode("abc") == Ids{400});
}

TEST_CASE("hf-bpe: a Split with a String pattern splits at that text, not at a regex") {
  test::TempDir tmp;
  json spec = base_spec();
  const auto split = [&](json pattern, const char* behavior) {
    spec["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         json::array({json{{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", false}},
                      json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
    return load(tmp, spec);
  };
  CHECK(split({{"String", "l"}}, "Isolated")->encode("hello") == Ids{256, 'l', 'l', 'o'});
  CHECK(split({{"String", "."}}, "Removed")->encode("a.b.c") == bytes_of("abc"));  // only the dots
  CHECK(split({{"Regex", "."}}, "Removed")->encode("a.b.c") == Ids{});             // every character
}

TEST_CASE("hf-bpe: added tokens are split out of the text and decode to their content") {
  test::TempDir tmp;
  json spec = base_spec();
  spec["added_tokens"].push_back(json{{"id", 501},
                                      {"content", "<x>"},
                                      {"single_word", false},
                                      {"lstrip", true},
                                      {"rstrip", true},
                                      {"normalized", false},
                                      {"special", false}});
  spec["added_tokens"].push_back(json{{"id", 502},
                                      {"content", "he"},
                                      {"single_word", true},
                                      {"lstrip", false},
                                      {"rstrip", false},
                                      {"normalized", true},
                                      {"special", false}});
  const auto tok = load(tmp, spec);
  CHECK(tok->encode("he<|eot|>he") == Ids{502, 500, 502});
  CHECK(tok->encode("a  <x>  b") == Ids{'a', 501, 'b'});  // lstrip and rstrip take the spaces
  CHECK(tok->encode("hello") == Ids{259});                // "he" is not a single word here
  CHECK(tok->decode(Ids{500, 'a', 501}) == "<|eot|>a<x>");
  CHECK(tok->token_id("<|eot|>") == 500u);
  const TokenizerDescription d = tok->describe();
  CHECK(d.kind == "hf-bpe");
  CHECK(d.model_sha256.size() == 64);
  CHECK(d.base_vocab_size == 401);
  CHECK(tok->vocab_size() == 503 + 5);  // the chat template's five tokens appended
  CHECK_THROWS_AS(tok->decode(Ids{450}), Error);
  CHECK_THROWS_AS(tok->encode(std::string_view("\xff")), Error);
}

TEST_CASE("hf-bpe: the model's end of sequence is tokenizer_config.json's eos_token") {
  test::TempDir tmp;
  CHECK_FALSE(load(tmp, base_spec())->model_eos_id().has_value());
  std::ofstream(tmp.path() / "tokenizer_config.json") << R"({"eos_token": {"content": "<|eot|>"}, "bos_token": "he"})";
  const auto tok = load(tmp, base_spec());
  CHECK(tok->model_eos_id() == 500u);
  CHECK(tok->model_bos_id() == 256u);
}

TEST_CASE("hf-bpe: a feature the native encoder cannot reproduce is refused, named") {
  test::TempDir tmp;
  const auto refused = [&](const json& spec, const char* feature) {
    const auto path = tmp.path() / "refused.json";
    std::ofstream(path) << spec.dump();
    CHECK_THROWS_WITH_AS(make_hf_bpe_tokenizer(path), doctest::Contains(feature), Error);
    CHECK(hf_bpe_unsupported(path).find(feature) != std::string::npos);
  };
  json spec = base_spec();
  spec["normalizer"] = {{"type", "Lowercase"}};
  refused(spec, "normalizer of type 'Lowercase'");
  spec = base_spec();
  spec["model"]["byte_fallback"] = true;
  refused(spec, "model.byte_fallback");
  spec = base_spec();
  spec["model"]["dropout"] = 0.1;
  refused(spec, "model.dropout");
  spec = base_spec();
  spec["pre_tokenizer"] = {{"type", "Metaspace"}};
  refused(spec, "pre_tokenizer of type 'Metaspace'");
  spec = base_spec();
  spec["truncation"] = {{"max_length", 8}};
  refused(spec, "truncation");
  spec = base_spec();
  spec["model"]["merges"].push_back(json::array({"q", "z"}));
  refused(spec, "not in the vocabulary");
  spec = base_spec();
  spec["added_tokens"][0]["id"] = 4000000000U;  // the tables would hold 4 G ids
  refused(spec, "token id 4000000000");
  CHECK_THROWS_AS(hf_bpe_unsupported(tmp.path() / "missing.json"), Error);  // io: not a refusal
  std::ofstream(tmp.path() / "tokenizer.json") << base_spec().dump();
  CHECK(hf_bpe_unsupported(tmp.path()).empty());  // a directory holding tokenizer.json
}
