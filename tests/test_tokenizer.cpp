// Tokenizers: the built-in bytes tokenizer, the factory, and a SentencePiece round trip on
// a model trained here with Debian's spm_train (the `sentencepiece` package, which dev.sh
// installs) from tests/data/spm_corpus.txt.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "prepare/prepare.hpp"
#include "tokenizer/sentencepiece_model.hpp"
#include "test_support.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace {

using namespace tokenfeed;
using test::find_spm_train;
using test::train_sentencepiece;
using Ids = std::vector<std::uint32_t>;
namespace fs = std::filesystem;

}  // namespace

TEST_CASE("tokenizer: bytes encodes UTF-8 bytes and appends the special tokens after them") {
  const auto tok = make_tokenizer("bytes");
  CHECK(tok->vocab_size() == 261);
  const SpecialTokenIds& sp = tok->special_ids();
  CHECK(sp.system == 256);
  CHECK(sp.user == 257);
  CHECK(sp.assistant == 258);
  REQUIRE(sp.tool.has_value());
  CHECK(*sp.tool == 259);
  CHECK(sp.eot == 260);

  CHECK(tok->encode("hé!") == Ids{'h', 0xC3, 0xA9, '!'});
  CHECK(tok->encode("").empty());
  const std::string text = "naïve café, φάρος\n\ttab";
  CHECK(tok->decode(tok->encode(text)) == text);

  Ids ids = {sp.user};
  tok->encode("hi", ids);  // appends
  ids.push_back(sp.eot);
  CHECK(ids == Ids{257, 'h', 'i', 260});
  CHECK(tok->decode(ids) ==
        "<|ngpt_usr_84a5023f67d74cf29cc4001becde983c|>hi<|ngpt_eot_84a5023f67d74cf29cc4001becde983c|>");
  CHECK(tok->decode(Ids{*sp.tool}) == "<|ngpt_tool_84a5023f67d74cf29cc4001becde983c|>");

  // Marker text in content stays bytes: it never becomes a special id.
  const Ids marker = tok->encode("<|ngpt_eot_84a5023f67d74cf29cc4001becde983c|>");
  for (const std::uint32_t id : marker) CHECK(id < 256);

  CHECK_THROWS_AS(tok->decode(Ids{261}), Error);

  const TokenizerDescription d = tok->describe();
  CHECK(d.kind == "bytes");
  CHECK(d.base_vocab_size == 256);
  CHECK(d.vocab_size == 261);
  REQUIRE(d.special_tokens.size() == 5);
  CHECK(d.special_tokens[3].role == "tool");
  CHECK(d.special_tokens[3].id == 259);
  CHECK(d.special_tokens[3].source == SpecialTokenSource::appended);
}

TEST_CASE("tokenizer: special token strings are configurable and validated") {
  SpecialTokenStrings strings;
  strings.tool = "<|tool|>";
  const auto tok = make_bytes_tokenizer(strings);
  CHECK(tok->decode(Ids{259}) == "<|tool|>");
  CHECK(tok->special_strings().tool == "<|tool|>");

  SpecialTokenStrings same;
  same.user = same.assistant;
  CHECK_THROWS_AS(make_bytes_tokenizer(same), Error);
  SpecialTokenStrings empty;
  empty.eot.clear();
  CHECK_THROWS_AS(make_bytes_tokenizer(empty), Error);
}

TEST_CASE("tokenizer: the factory parses --tokenizer values and reports bad ones") {
  CHECK(make_tokenizer("bytes")->describe().kind == "bytes");
  CHECK_THROWS_WITH_AS(make_tokenizer("gpt2"), doctest::Contains("unknown tokenizer 'gpt2'"), Error);
  CHECK_THROWS_WITH_AS(make_tokenizer("sentencepiece:"), doctest::Contains("needs a model file"), Error);
  CHECK(test::error_of([] { make_tokenizer("sentencepiece:/nonexistent/tokenfeed/model.model"); }, ErrorKind::io)
            .find("/nonexistent/tokenfeed/model.model") != std::string::npos);
  test::TempDir tmp;
  test::write_text(tmp / "junk.model", "this is not a sentencepiece model");
  CHECK_THROWS_AS(make_tokenizer("sentencepiece:" + (tmp / "junk.model").string()), Error);
}

// A varint of the protobuf wire format.
std::string varint(std::uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string length_field(std::uint64_t field, const std::string& bytes) {
  return varint(field << 3 | 2) + varint(bytes.size()) + bytes;
}

TEST_CASE("tokenizer: SentencePiece piece types are read from the serialized model") {
  using T = SentencePieceType;
  // ModelProto { pieces = 1 { piece = 1; score = 2 (fixed32); type = 3 } ; trainer_spec = 2; ... }
  const auto piece = [](const std::string& text, int type) {
    std::string p = length_field(1, text) + varint(2 << 3 | 5) + std::string(4, '\0');
    if (type != 0) p += varint(3 << 3 | 0) + varint(static_cast<std::uint64_t>(type));
    return length_field(1, p);
  };
  const std::string model = length_field(2, "trainer spec bytes") + piece("<unk>", 2) + piece("<s>", 3) +
                            piece("hello", 0) + piece("<|u|>", 4) + varint(99 << 3 | 0) + varint(300) +
                            piece("<0x41>", 6) + piece("x", 5) + varint(98 << 3 | 1) + std::string(8, '\1');
  CHECK(read_sentencepiece_piece_types(model, "m") ==
        std::vector<T>{T::unknown, T::control, T::normal, T::user_defined, T::byte, T::unused});
  CHECK(read_sentencepiece_piece_types("", "m").empty());
  // Malformed data is a format error naming the model, never a crash or a silent guess.
  const auto fails = [](const std::string& bytes) {
    CHECK_THROWS_WITH_AS(read_sentencepiece_piece_types(bytes, "model 'm'"), doctest::Contains("model 'm'"), Error);
  };
  fails(model.substr(0, model.size() - 3));           // truncated
  fails(piece("a", 0) + "\x0a\x80");                   // a truncated length
  fails(length_field(1, varint(3 << 3 | 0) + varint(9)));  // an unknown type value
  fails(varint(1 << 3 | 0) + varint(5));               // pieces that are not a message
  fails(varint(7 << 3 | 3));                           // a group (wire type 3)
  fails(std::string("\x00", 1));                       // field number 0
}

TEST_CASE("tokenizer: SentencePiece round trip on a model trained in the test") {
  const fs::path spm_train = find_spm_train();
  // CI and dev.sh install Debian's `sentencepiece` package: a missing spm_train is a broken
  // environment, not a reason to pass without testing anything.
  REQUIRE_MESSAGE(!spm_train.empty(),
                  "spm_train not found on PATH; install Debian's 'sentencepiece' package (dev.sh deps does)");
  test::TempDir tmp;
  const SpecialTokenStrings strings;

  SUBCASE("special tokens the model defines are taken from it; the others are appended") {
    const fs::path model = train_sentencepiece(spm_train, tmp.path(), strings.system + "," + strings.eot);
    const auto tok = make_tokenizer("sentencepiece:" + model.string());
    const TokenizerDescription d = tok->describe();
    CHECK(d.kind == "sentencepiece");
    CHECK(d.model_sha256.size() == 64);
    REQUIRE(d.special_tokens.size() == 5);
    CHECK(d.special_tokens[0].source == SpecialTokenSource::model);     // system
    CHECK(d.special_tokens[1].source == SpecialTokenSource::appended);  // user
    CHECK(d.special_tokens[2].source == SpecialTokenSource::appended);  // assistant
    CHECK(d.special_tokens[3].source == SpecialTokenSource::appended);  // tool
    CHECK(d.special_tokens[4].source == SpecialTokenSource::model);     // eot
    const SpecialTokenIds& sp = tok->special_ids();
    CHECK(sp.system < d.base_vocab_size);
    CHECK(sp.eot < d.base_vocab_size);
    CHECK(sp.user == d.base_vocab_size);
    CHECK(sp.assistant == d.base_vocab_size + 1);
    CHECK(*sp.tool == d.base_vocab_size + 2);
    CHECK(tok->vocab_size() == d.base_vocab_size + 3);

    // Each special token is one id, and its string decodes back.
    CHECK(tok->encode(strings.system) == Ids{sp.system});
    CHECK(tok->decode(Ids{sp.user}) == strings.user);

    for (const std::string text : {"The harbour town wakes before the sun.", "a café in Zürich, φάρος",
                                   "unseen words: quixotic zephyr 🚀 ½", "  two  spaces and a tab\t", ""}) {
      const Ids ids = tok->encode(text);
      for (const std::uint32_t id : ids) CHECK(id < d.base_vocab_size);
      CHECK(tok->decode(ids) == text);
    }

    // A whole chat decodes back to the template text.
    const std::vector<ChatMessage> chat = {{"user", "How long does the ferry take?"},
                                           {"assistant", "About forty minutes."}};
    const Ids ids = serialize_chat_to_ids(chat, *tok, "Be brief.");
    CHECK(tok->decode(ids) == strings.system + "Be brief." + strings.eot + strings.user +
                                  "How long does the ferry take?" + strings.eot + strings.assistant +
                                  "About forty minutes." + strings.eot);
    const std::vector<std::uint8_t> mask = sft_loss_mask_for_ids(ids, sp);
    Ids trained;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (mask[i] != 0) trained.push_back(ids[i]);
    }
    CHECK(tok->decode(trained) == "About forty minutes." + strings.eot);

    // Content holding a special token string the model defines is rejected, not split into turns.
    Ids out;
    const auto defect = append_chat_ids(
        std::vector<ChatMessage>{{"user", "say " + strings.eot + " now"}, {"assistant", "no"}}, *tok, "", out);
    REQUIRE(defect);
    CHECK(defect->problem == ChatProblem::special_token_in_content);
  }

  SUBCASE("a model without the special tokens gets all five appended") {
    const fs::path model = train_sentencepiece(spm_train, tmp.path(), "");
    const auto tok = make_sentencepiece_tokenizer(model);
    const TokenizerDescription d = tok->describe();
    for (const SpecialTokenInfo& s : d.special_tokens) CHECK(s.source == SpecialTokenSource::appended);
    CHECK(tok->special_ids().system == d.base_vocab_size);
    CHECK(tok->special_ids().eot == d.base_vocab_size + 4);
    CHECK(tok->vocab_size() == d.base_vocab_size + 5);
    // The marker text is ordinary text for this model.
    for (const std::uint32_t id : tok->encode(strings.eot)) CHECK(id < d.base_vocab_size);
    CHECK(tok->decode(tok->encode(strings.eot)) == strings.eot);
    CHECK_THROWS_AS(tok->decode(Ids{tok->vocab_size()}), Error);
  }

  SUBCASE("an ordinary piece is never a special token: it is appended instead") {
    const fs::path model = train_sentencepiece(spm_train, tmp.path(), "");
    const auto plain = make_sentencepiece_tokenizer(model);
    const std::uint32_t base = plain->describe().base_vocab_size;
    // A multi-character word the model has as one ordinary piece.
    std::string word;
    for (const std::string candidate : {"the", "The", "and", "harbour", "in", "an", "th"}) {
      if (plain->encode(candidate).size() == 1) {
        word = candidate;
        break;
      }
    }
    REQUIRE_MESSAGE(!word.empty(), "the trained model has none of the candidate words as one piece");
    const std::uint32_t piece_id = plain->encode(word)[0];
    REQUIRE(piece_id < base);

    SpecialTokenStrings strings_with_word;
    strings_with_word.eot = word;
    const auto tok = make_sentencepiece_tokenizer(model, strings_with_word);
    const TokenizerDescription d = tok->describe();
    CHECK(d.special_tokens[4].source == SpecialTokenSource::appended);
    CHECK(tok->special_ids().eot == base + 4);  // after system, user, assistant, tool
    CHECK(tok->special_ids().eot != piece_id);
    // The word in content stays the model's piece, not a turn boundary.
    CHECK(tok->encode(word) == Ids{piece_id});
    Ids ids;
    const auto defect = append_chat_ids(
        std::vector<ChatMessage>{{"user", word}, {"assistant", word}}, *tok, "", ids);
    REQUIRE_FALSE(defect);
    const SpecialTokenIds& sp = tok->special_ids();
    // An empty default system text: no system turn.
    CHECK(ids == Ids{sp.user, piece_id, sp.eot, sp.assistant, piece_id, sp.eot});
    CHECK(sft_loss_mask_for_ids(ids, sp) == std::vector<std::uint8_t>{0, 0, 0, 0, 1, 1});
  }

  SUBCASE("control symbols qualify; the unknown and byte pieces do not") {
    const fs::path model = train_sentencepiece(spm_train, tmp.path(), strings.system, strings.user);
    SpecialTokenStrings with_model_pieces;
    with_model_pieces.assistant = "<unk>";   // the model's unknown piece
    with_model_pieces.tool = "<0x41>";       // a byte-fallback piece
    with_model_pieces.eot = "</s>";          // a control symbol (the default end of sentence)
    const auto tok = make_sentencepiece_tokenizer(model, with_model_pieces);
    const TokenizerDescription d = tok->describe();
    const std::uint32_t base = d.base_vocab_size;
    CHECK(d.special_tokens[0].source == SpecialTokenSource::model);     // user-defined
    CHECK(d.special_tokens[1].source == SpecialTokenSource::model);     // control, from --control_symbols
    CHECK(d.special_tokens[2].source == SpecialTokenSource::appended);  // <unk>
    CHECK(d.special_tokens[3].source == SpecialTokenSource::appended);  // <0x41>
    CHECK(d.special_tokens[4].source == SpecialTokenSource::model);     // </s>
    CHECK(tok->special_ids().system < base);
    CHECK(tok->special_ids().user < base);
    CHECK(tok->special_ids().eot < base);
    CHECK(tok->special_ids().assistant == base);
    CHECK(*tok->special_ids().tool == base + 1);
    CHECK(tok->vocab_size() == base + 2);
  }

  SUBCASE("prepare records the model by its canonical path and the specials' sources") {
    const fs::path model = train_sentencepiece(spm_train, tmp.path(), strings.eot);
    fs::create_directories(tmp / "link");
    fs::create_symlink(model, tmp / "link" / "tok.model");
    test::write_text(tmp / "in.jsonl",
                     R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]})"
                     "\n");
    PrepareOptions o;
    o.input = tmp / "in.jsonl";
    o.output_dir = tmp / "out";
    o.val_split = 0.0;
    o.threads = 2;
    o.tokenizer = "sentencepiece:" + (tmp / "link" / ".." / "link" / "tok.model").string();
    prepare_chat_dataset(o);
    std::ifstream in(tmp / "out" / "tokenizer_state.json");
    const nlohmann::json state = nlohmann::json::parse(in);
    CHECK(state["kind"] == "sentencepiece");
    CHECK(state["model"]["path"] == fs::canonical(model).string());
    CHECK(state["model"]["sha256"].get<std::string>().size() == 64);
    CHECK(state["special_tokens"]["eot"]["source"] == "model");
    CHECK(state["special_tokens"]["user"]["source"] == "appended");
  }
}
