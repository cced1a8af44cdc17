// Golden tests of the SFT chat template (spec pr-04): serialization, assistant-only mask,
// turn-aware truncation, padding and collation, with a tiny fake tokenizer.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/tokenizer.hpp"

namespace {

using namespace tokenfeed;
using Ids = std::vector<std::uint32_t>;
using Mask = std::vector<std::uint8_t>;

// Special ids of the fake tokenizer.
constexpr std::uint32_t SYS = 1, USR = 2, ASST = 3, TOOL = 4, EOT = 5;

SpecialTokenIds fake_special() {
  SpecialTokenIds s;
  s.system = SYS;
  s.user = USR;
  s.assistant = ASST;
  s.tool = TOOL;
  s.eot = EOT;
  return s;
}

// Splits text on spaces. The words of the default system text have fixed ids 10..14; a word
// "wN" is id N; any other word is an error. Special ids are never produced for text, except
// that the word "SPECIAL" encodes to the assistant id (to test that content cannot smuggle
// in a role token).
class FakeTokenizer final : public Tokenizer {
 public:
  FakeTokenizer() : Tokenizer(SpecialTokenStrings{}, fake_special(), 1000) {}
  TokenizerDescription describe() const override {
    TokenizerDescription d;
    d.kind = "fake";
    d.vocab_size = vocab_size();
    return d;
  }

 protected:
  void do_encode(std::string_view text, std::vector<std::uint32_t>& out) const override {
    static const std::map<std::string, std::uint32_t, std::less<>> kWords = {
        {"you", 10}, {"are", 11}, {"a", 12}, {"helpful", 13}, {"assistant.", 14}, {"SPECIAL", ASST}};
    std::size_t i = 0;
    while (i < text.size()) {
      if (text[i] == ' ') {
        ++i;
        continue;
      }
      const std::size_t j = std::min(text.find(' ', i), text.size());
      const std::string_view word = text.substr(i, j - i);
      if (const auto it = kWords.find(word); it != kWords.end()) {
        out.push_back(it->second);
      } else if (word.size() > 1 && word[0] == 'w') {
        out.push_back(static_cast<std::uint32_t>(std::stoul(std::string(word.substr(1)))));
      } else {
        throw Error(ErrorKind::format, "fake tokenizer: unknown word '" + std::string(word) + "'");
      }
      i = j;
    }
  }
  std::string do_decode(std::span<const std::uint32_t> ids) const override {
    std::string text;
    for (const std::uint32_t id : ids) text += (text.empty() ? "w" : " w") + std::to_string(id);
    return text;
  }
};

// The default system turn with the fake tokenizer.
const Ids kDefaultSystemTurn = {SYS, 10, 11, 12, 13, 14, EOT};

Ids concat(std::initializer_list<Ids> parts) {
  Ids all;
  for (const Ids& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

Mask concat_mask(std::initializer_list<Mask> parts) {
  Mask all;
  for (const Mask& p : parts) all.insert(all.end(), p.begin(), p.end());
  return all;
}

}  // namespace

TEST_CASE("chat: serialization shape injects the default system turn and wraps every turn") {
  const FakeTokenizer tok;
  const std::vector<ChatMessage> chat = {{"user", "w20 w21"}, {"assistant", "w30"}};
  const Ids ids = serialize_chat_to_ids(chat, tok);
  CHECK(ids == concat({kDefaultSystemTurn, {USR, 20, 21, EOT}, {ASST, 30, EOT}}));
  CHECK(ids.front() == SYS);
  CHECK(ids.back() == EOT);
}

TEST_CASE("chat: serialization keeps a given system message and a configurable default") {
  const FakeTokenizer tok;
  SUBCASE("given system message, no default injected") {
    const std::vector<ChatMessage> chat = {{"system", "w7"}, {"user", "w20"}, {"assistant", "w30"}};
    CHECK(serialize_chat_to_ids(chat, tok) == Ids{SYS, 7, EOT, USR, 20, EOT, ASST, 30, EOT});
  }
  SUBCASE("custom default system text") {
    const std::vector<ChatMessage> chat = {{"user", "w20"}, {"assistant", "w30"}};
    CHECK(serialize_chat_to_ids(chat, tok, "w8 w9") == Ids{SYS, 8, 9, EOT, USR, 20, EOT, ASST, 30, EOT});
  }
  SUBCASE("empty contents still give one role token and one end-of-turn per turn") {
    const std::vector<ChatMessage> chat = {{"user", ""}, {"assistant", ""}};
    CHECK(serialize_chat_to_ids(chat, tok, "w8") == Ids{SYS, 8, EOT, USR, EOT, ASST, EOT});
  }
  SUBCASE("an empty default system text means no system turn, not an empty one") {
    const std::vector<ChatMessage> chat = {{"user", "w20"}, {"assistant", "w30"}};
    CHECK(serialize_chat_to_ids(chat, tok, "") == Ids{USR, 20, EOT, ASST, 30, EOT});
  }
  SUBCASE("multi-turn order is preserved") {
    const std::vector<ChatMessage> chat = {
        {"user", "w20"}, {"assistant", "w30"}, {"user", "w21"}, {"assistant", "w31 w32"}};
    CHECK(serialize_chat_to_ids(chat, tok, "w8") ==
          Ids{SYS, 8, EOT, USR, 20, EOT, ASST, 30, EOT, USR, 21, EOT, ASST, 31, 32, EOT});
  }
}

TEST_CASE("chat: the tool role has its own token and is never trained on") {
  const FakeTokenizer tok;
  const std::vector<ChatMessage> chat = {
      {"user", "w20"}, {"assistant", "w30"}, {"tool", "w40 w41"}, {"assistant", "w31"}};
  const Ids ids = serialize_chat_to_ids(chat, tok, "w8");
  CHECK(ids == Ids{SYS, 8, EOT, USR, 20, EOT, ASST, 30, EOT, TOOL, 40, 41, EOT, ASST, 31, EOT});
  const Mask mask = sft_loss_mask_for_ids(ids, tok.special_ids());
  CHECK(mask == Mask{0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1});
}

TEST_CASE("chat: mask on a one-turn chat is true only on assistant content and its end-of-turn") {
  const FakeTokenizer tok;
  const std::vector<ChatMessage> chat = {{"user", "w20 w21"}, {"assistant", "w30 w31 w32"}};
  const Ids ids = serialize_chat_to_ids(chat, tok);
  const Mask mask = sft_loss_mask_for_ids(ids, tok.special_ids());
  REQUIRE(mask.size() == ids.size());
  //                     SYS you are a  helpful assistant. EOT USR w20 w21 EOT ASST w30 w31 w32 EOT
  CHECK(mask == Mask{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1});
}

TEST_CASE("chat: mask scanning is robust to malformed ids") {
  const SpecialTokenIds sp = fake_special();
  SUBCASE("a role token interrupting an unterminated assistant span is 0 and ends the span") {
    const Ids ids = {ASST, 30, 31, USR, 20, EOT};
    CHECK(sft_loss_mask_for_ids(ids, sp) == Mask{0, 1, 1, 0, 0, 0});
  }
  SUBCASE("an end-of-turn outside an assistant span is 0") {
    CHECK(sft_loss_mask_for_ids(Ids{EOT, 20, EOT, ASST, EOT}, sp) == Mask{0, 0, 0, 0, 1});
  }
  SUBCASE("the span-mode scan through a provided buffer; wrong size is a usage error") {
    Mask m(3);
    sft_loss_mask_for_ids(Ids{ASST, 9, EOT}, sp, m);
    CHECK(m == Mask{0, 1, 1});
    Mask wrong(2);
    CHECK_THROWS_AS(sft_loss_mask_for_ids(Ids{ASST, 9, EOT}, sp, wrong), Error);
  }
}

TEST_CASE("chat: bad conversations are clear errors") {
  const FakeTokenizer tok;
  const auto problem_of = [&](const std::vector<ChatMessage>& chat) {
    Ids out;
    const auto defect = append_chat_ids(chat, tok, kDefaultSystemText, out);
    REQUIRE(defect.has_value());
    return defect->problem;
  };
  CHECK(problem_of({}) == ChatProblem::empty_conversation);
  CHECK(problem_of({{"user", "w1"}, {"bot", "w2"}}) == ChatProblem::unknown_role);
  CHECK(problem_of({{"User", "w1"}, {"assistant", "w2"}}) == ChatProblem::unknown_role);  // lowercase only
  CHECK(problem_of({{"user", "w1"}, {"user", "w2"}}) == ChatProblem::no_assistant_turn);
  CHECK(problem_of({{"user", "w1"}, {"system", "w3"}, {"assistant", "w2"}}) == ChatProblem::misplaced_system);
  CHECK(problem_of({{"user", "SPECIAL"}, {"assistant", "w2"}}) == ChatProblem::special_token_in_content);

  Ids out;
  const auto defect = append_chat_ids(std::vector<ChatMessage>{{"user", "w1"}, {"robot", "w2"}}, tok, "", out);
  REQUIRE(defect);
  CHECK(defect->message_index == 1);
  CHECK(defect->detail.find("message 2") != std::string::npos);
  CHECK(defect->detail.find("robot") != std::string::npos);

  const std::vector<ChatMessage> no_assistant = {{"user", "w1"}};
  CHECK_THROWS_WITH_AS(serialize_chat_to_ids(no_assistant, tok), doctest::Contains("no_assistant_turn"), Error);
}

TEST_CASE("chat: pre-tokenized conversations serialize with the given special ids") {
  SpecialTokenIds sp = fake_special();
  const std::vector<TokenizedChatMessage> chat = {{"user", {20, 21}}, {"assistant", {30}}};
  const Ids default_system = {8, 9};
  CHECK(serialize_chat_to_ids(chat, sp, default_system) == Ids{SYS, 8, 9, EOT, USR, 20, 21, EOT, ASST, 30, EOT});

  Ids out;
  SUBCASE("ids at or above the vocabulary size") {
    const auto d = append_tokenized_chat_ids(chat, sp, default_system, 30, out);
    REQUIRE(d);
    CHECK(d->problem == ChatProblem::id_out_of_range);
  }
  SUBCASE("a special id inside content") {
    const std::vector<TokenizedChatMessage> bad = {{"user", {20, EOT}}, {"assistant", {30}}};
    const auto d = append_tokenized_chat_ids(bad, sp, default_system, 1000, out);
    REQUIRE(d);
    CHECK(d->problem == ChatProblem::special_token_in_content);
  }
  SUBCASE("tool turns without a tool id") {
    sp.tool.reset();
    const std::vector<TokenizedChatMessage> with_tool = {{"user", {20}}, {"tool", {21}}, {"assistant", {30}}};
    const auto d = append_tokenized_chat_ids(with_tool, sp, default_system, 1000, out);
    REQUIRE(d);
    CHECK(d->problem == ChatProblem::no_tool_token);
  }
  SUBCASE("equal special ids are a configuration error") {
    sp.user = sp.assistant;
    CHECK_THROWS_AS(check_special_token_ids(sp, "test"), Error);
  }
}

TEST_CASE("chat: padding fills to S with pad_id and mask 0") {
  const SpecialTokenIds sp = fake_special();
  const Ids ids = {SYS, 8, EOT, USR, 20, EOT, ASST, 30, EOT};
  const Mask mask = sft_loss_mask_for_ids(ids, sp);
  const PackedSft packed = pack_sft_ids_and_mask(ids, mask, 12, sp, /*pad_id=*/EOT);
  CHECK(packed.ids == Ids{SYS, 8, EOT, USR, 20, EOT, ASST, 30, EOT, EOT, EOT, EOT});
  CHECK(packed.mask == Mask{0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0});

  SUBCASE("exact fit: no change") {
    const PackedSft same = pack_sft_ids_and_mask(ids, mask, ids.size(), sp, EOT);
    CHECK(same.ids == ids);
    CHECK(same.mask == mask);
  }
  SUBCASE("a different pad id") {
    const PackedSft p = pack_sft_ids_and_mask(ids, mask, 10, sp, 999);
    CHECK(p.ids.back() == 999);
    CHECK(p.mask.back() == 0);
  }
  SUBCASE("size errors") {
    CHECK_THROWS_AS(pack_sft_ids_and_mask(ids, Mask(3), 12, sp, EOT), Error);
    CHECK_THROWS_AS(pack_sft_ids_and_mask(ids, mask, 0, sp, EOT), Error);
  }
}

TEST_CASE("chat: truncation drops the oldest whole user+assistant pairs and keeps the last assistant turn") {
  const FakeTokenizer tok;
  const SpecialTokenIds sp = tok.special_ids();
  const std::vector<ChatMessage> chat = {{"system", "w40"},       {"user", "w20 w21"},      {"assistant", "w22 w23"},
                                         {"user", "w24"},         {"assistant", "w25 w26"}, {"user", "w27"},
                                         {"assistant", "w28 w29"}};
  const Ids ids = serialize_chat_to_ids(chat, tok);
  const Ids sys = {SYS, 40, EOT};
  const Ids pair1 = {USR, 20, 21, EOT, ASST, 22, 23, EOT};
  const Ids pair2 = {USR, 24, EOT, ASST, 25, 26, EOT};
  const Ids pair3 = {USR, 27, EOT, ASST, 28, 29, EOT};
  REQUIRE(ids == concat({sys, pair1, pair2, pair3}));
  const Mask mask = sft_loss_mask_for_ids(ids, sp);

  SUBCASE("one pair dropped, then padded") {
    const PackedSft p = pack_sft_ids_and_mask(ids, mask, 18, sp, EOT);
    CHECK(p.ids == concat({sys, pair2, pair3, {EOT}}));
    CHECK(p.mask == Mask{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 0});
  }
  SUBCASE("two pairs dropped") {
    const PackedSft p = pack_sft_ids_and_mask(ids, mask, 11, sp, EOT);
    CHECK(p.ids == concat({sys, pair3, {EOT}}));
    CHECK(p.mask == Mask{0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 0});
  }
  SUBCASE("exactly fitting after a drop needs no padding") {
    const PackedSft p = pack_sft_ids_and_mask(ids, mask, 17, sp, EOT);
    CHECK(p.ids == concat({sys, pair2, pair3}));
  }
  SUBCASE("still too long: hard left-truncation, the last assistant end-of-turn stays") {
    const PackedSft p = pack_sft_ids_and_mask(ids, mask, 8, sp, EOT);
    // What remains after dropping pairs 1 and 2 is sys + pair3 (10 tokens); its last 8 tokens.
    CHECK(p.ids == Ids{EOT, USR, 27, EOT, ASST, 28, 29, EOT});
    CHECK(p.mask == Mask{0, 0, 0, 0, 0, 1, 1, 1});
  }
  SUBCASE("the window plan says which ranges are kept") {
    const SftWindow w = plan_sft_window(std::span<const std::uint32_t>(ids), 18, sp);
    CHECK(w.head_begin == 0);
    CHECK(w.head_end == 3);
    CHECK(w.tail_begin == 11);
    CHECK(w.tail_end == ids.size());
    CHECK(w.size() == 17);
    const std::vector<std::uint16_t> narrow(ids.begin(), ids.end());
    const SftWindow w16 = plan_sft_window(std::span<const std::uint16_t>(narrow), 18, sp);
    CHECK(w16.head_end == w.head_end);
    CHECK(w16.tail_begin == w.tail_begin);
    CHECK(w16.tail_end == w.tail_end);
  }
}

TEST_CASE("chat: truncation never drops the final assistant turn and keeps its end-of-turn") {
  const FakeTokenizer tok;
  const SpecialTokenIds sp = tok.special_ids();

  SUBCASE("one huge assistant message keeps its last tokens and its end-of-turn") {
    std::string reply;
    for (int w = 100; w < 130; ++w) reply += " w" + std::to_string(w);
    const std::vector<ChatMessage> chat = {{"system", "w40"}, {"user", "w20"}, {"assistant", reply}};
    const Ids ids = serialize_chat_to_ids(chat, tok);
    const PackedSft p = pack_sft_ids_and_mask(ids, sft_loss_mask_for_ids(ids, sp), 6, sp, EOT);
    CHECK(p.ids == Ids{125, 126, 127, 128, 129, EOT});
    CHECK(p.mask == Mask{1, 1, 1, 1, 1, 1});
  }
  SUBCASE("turns after the final assistant turn are cut before it is") {
    const std::vector<ChatMessage> chat = {
        {"system", "w40"}, {"user", "w20"}, {"assistant", "w30"}, {"user", "w21 w22 w23 w24 w25"}};
    const Ids ids = serialize_chat_to_ids(chat, tok);
    const PackedSft p = pack_sft_ids_and_mask(ids, sft_loss_mask_for_ids(ids, sp), 8, sp, EOT);
    CHECK(p.ids == Ids{40, EOT, USR, 20, EOT, ASST, 30, EOT});
    CHECK(p.mask == Mask{0, 0, 0, 0, 0, 0, 1, 1});
  }
  SUBCASE("a tool exchange stays whole with its user turn; only older exchanges go") {
    const std::vector<ChatMessage> chat = {{"system", "w40"},    {"user", "w20"}, {"assistant", "w30"}, {"user", "w21"},
                                           {"assistant", "w31"}, {"tool", "w50"}, {"assistant", "w32"}};
    const Ids ids = serialize_chat_to_ids(chat, tok);
    const PackedSft p = pack_sft_ids_and_mask(ids, sft_loss_mask_for_ids(ids, sp), 15, sp, EOT);
    CHECK(p.ids == Ids{SYS, 40, EOT, USR, 21, EOT, ASST, 31, EOT, TOOL, 50, EOT, ASST, 32, EOT});
  }
  SUBCASE("ids without a leading system turn: whole exchanges still go first") {
    const Ids ids = {USR, 20, EOT, ASST, 30, EOT, USR, 21, EOT, ASST, 31, EOT};
    const PackedSft p = pack_sft_ids_and_mask(ids, sft_loss_mask_for_ids(ids, sp), 7, sp, EOT);
    CHECK(p.ids == Ids{USR, 21, EOT, ASST, 31, EOT, EOT});
    CHECK(p.mask == Mask{0, 0, 0, 0, 1, 1, 0});
  }
  SUBCASE("pack_sft_into writes exactly the output size and reports the kept count") {
    const Ids ids = {SYS, 40, EOT, USR, 20, EOT, ASST, 30, EOT};
    Ids out(12, 77);
    Mask out_mask(12, 7);
    CHECK(pack_sft_into(ids, sft_loss_mask_for_ids(ids, sp), sp, EOT, out, out_mask) == ids.size());
    CHECK(out == Ids{SYS, 40, EOT, USR, 20, EOT, ASST, 30, EOT, EOT, EOT, EOT});
    CHECK(out_mask == Mask{0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0});
  }
}

TEST_CASE("chat: collate shifts x and y by one and puts the ignore index where the mask is false") {
  const SpecialTokenIds sp = fake_special();
  const Ids ids = {SYS, 8, EOT, USR, 20, EOT, ASST, 30, 31, EOT};
  const Mask mask = sft_loss_mask_for_ids(ids, sp);
  const std::size_t T = 11;
  std::vector<PackedSft> rows = {pack_sft_ids_and_mask(ids, mask, T + 1, sp, EOT),
                                 pack_sft_ids_and_mask(ids, mask, T + 1, sp, EOT)};
  rows[1].ids[1] = 9;  // a second, different row
  const SftBatch b = collate_sft_batch(rows, T);
  REQUIRE(b.rows == 2);
  REQUIRE(b.T == T);
  REQUIRE(b.x.size() == 2 * T);
  REQUIRE(b.y.size() == 2 * T);
  REQUIRE(b.loss_mask.size() == 2 * T);
  const std::vector<std::int64_t> x0(b.x.begin(), b.x.begin() + T);
  const std::vector<std::int64_t> y0(b.y.begin(), b.y.begin() + T);
  const std::vector<std::uint8_t> m0(b.loss_mask.begin(), b.loss_mask.begin() + T);
  CHECK(x0 == std::vector<std::int64_t>{SYS, 8, EOT, USR, 20, EOT, ASST, 30, 31, EOT, EOT});
  CHECK(y0 == std::vector<std::int64_t>{-100, -100, -100, -100, -100, -100, 30, 31, EOT, -100, -100});
  CHECK(m0 == Mask{0, 0, 0, 0, 0, 0, 1, 1, 1, 0, 0});
  CHECK(b.x[T + 1] == 9);
  // y where the mask is true equals x shifted by one.
  for (std::size_t r = 0; r < b.rows; ++r) {
    for (std::size_t i = 0; i < T; ++i) {
      if (b.loss_mask[r * T + i] != 0) {
        CHECK(b.y[r * T + i] == static_cast<std::int64_t>(rows[r].ids[i + 1]));
      } else {
        CHECK(b.y[r * T + i] == kIgnoreIndex);
      }
    }
  }
  SUBCASE("a custom ignore index") {
    const SftBatch c = collate_sft_batch(rows, T, -1);
    CHECK(c.y[0] == -1);
  }
  SUBCASE("rows of the wrong length are usage errors") {
    CHECK_THROWS_AS(collate_sft_batch(rows, T + 1), Error);
    CHECK_THROWS_AS(collate_sft_batch(rows, 0), Error);
  }
}

TEST_CASE("chat: role names parse in lowercase only") {
  CHECK(parse_chat_role("system") == ChatRole::system);
  CHECK(parse_chat_role("user") == ChatRole::user);
  CHECK(parse_chat_role("assistant") == ChatRole::assistant);
  CHECK(parse_chat_role("tool") == ChatRole::tool);
  CHECK(parse_chat_role("developer") == ChatRole::system);  // OpenAI's newer name for it
  CHECK_FALSE(parse_chat_role("Assistant"));
  CHECK_FALSE(parse_chat_role("function"));
  CHECK(std::string(to_string(ChatRole::tool)) == "tool");
  CHECK(std::string(to_string(ChatProblem::no_assistant_turn)) == "no_assistant_turn");
}

TEST_CASE("chat: a message with trained == false (weight 0) keeps its turn but leaves the loss mask") {
  const FakeTokenizer tok;
  std::vector<ChatMessage> chat = {{"user", "w20"}, {"assistant", "w30"}, {"user", "w21"}, {"assistant", "w31"}};
  chat[1].trained = false;
  for (const std::string_view system : {"w8", ""}) {
    CAPTURE(system);
    const Ids ids = serialize_chat_to_ids(chat, tok, system);
    const Mask mask = chat_loss_mask(chat, ids, tok.special_ids());
    const Ids turns = {USR, 20, EOT, ASST, 30, EOT, USR, 21, EOT, ASST, 31, EOT};
    const Mask turns_mask = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1};
    CHECK(ids == (system.empty() ? turns : concat({{SYS, 8, EOT}, turns})));
    CHECK(mask == (system.empty() ? turns_mask : concat_mask({{0, 0, 0}, turns_mask})));
  }
  // All trained: the same mask as scanning the ids.
  chat[1].trained = true;
  const Ids ids = serialize_chat_to_ids(chat, tok, "w8");
  CHECK(chat_loss_mask(chat, ids, tok.special_ids()) == sft_loss_mask_for_ids(ids, tok.special_ids()));
  // Ids of another conversation are a usage error, not a wrong mask.
  CHECK_THROWS_AS(chat_loss_mask(std::span<const ChatMessage>(chat).first(1), ids, tok.special_ids()), Error);
}

TEST_CASE("chat: a developer message is the system turn and must come first") {
  const FakeTokenizer tok;
  const std::vector<ChatMessage> chat = {{"developer", "w7"}, {"user", "w20"}, {"assistant", "w30"}};
  CHECK(serialize_chat_to_ids(chat, tok) == Ids{SYS, 7, EOT, USR, 20, EOT, ASST, 30, EOT});
  const std::vector<ChatMessage> late = {{"user", "w20"}, {"developer", "w7"}, {"assistant", "w30"}};
  std::vector<std::uint32_t> out;
  const auto defect = append_chat_ids(late, tok, "w8", out);
  REQUIRE(defect);
  CHECK(defect->problem == ChatProblem::misplaced_system);
}
