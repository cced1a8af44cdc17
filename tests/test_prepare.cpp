// `tokenfeed prepare` (prepare_chat_dataset) and its parts: SHA-256, the line reader, the
// JSONL parser, bad-line handling, split stability, the temporary output directory (stale
// ones, interruption), and an end-to-end check that reads the written shards back
// (tokens.bin, mask.bin, episodes.idx) and decodes them.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "chat/conversation_jsonl.hpp"
#include "io/line_reader.hpp"
#include "prepare/prepare.hpp"
#include "util/sha256.hpp"
#include "io/staging_dir.hpp"
#include "test_support.hpp"
#include "tokenfeed/batch.hpp"
#include "tokenfeed/chat_format.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/tokenizer.hpp"
#include "tokenfeed/version.hpp"

namespace {

using namespace tokenfeed;
namespace fs = std::filesystem;
using Ids = std::vector<std::uint32_t>;
using nlohmann::json;

struct Episode {
  Ids tokens;
  std::vector<std::uint8_t> mask;
};

std::vector<char> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Reads a split written by prepare directly from its shard files.
std::vector<Episode> read_split(const fs::path& split_dir, TokenDtype dtype) {
  std::vector<fs::path> shards;
  for (const auto& entry : fs::directory_iterator(split_dir)) shards.push_back(entry.path());
  std::sort(shards.begin(), shards.end());
  std::vector<Episode> episodes;
  for (const fs::path& shard : shards) {
    REQUIRE(shard.filename().string().starts_with("shard_"));
    const std::vector<char> tokens = read_file(shard / "tokens.bin");
    const std::vector<char> mask = read_file(shard / "mask.bin");
    const std::vector<char> index = read_file(shard / "episodes.idx");
    const std::size_t width = size_of(dtype);
    REQUIRE(tokens.size() % width == 0);
    REQUIRE(mask.size() == tokens.size() / width);
    REQUIRE(index.size() % 16 == 0);
    std::uint64_t expected_start = 0;
    for (std::size_t r = 0; r < index.size() / 16; ++r) {
      std::uint64_t start = 0, length = 0;
      std::memcpy(&start, index.data() + 16 * r, 8);
      std::memcpy(&length, index.data() + 16 * r + 8, 8);
      CHECK(start == expected_start);  // episodes are contiguous, in order
      expected_start = start + length;
      REQUIRE(start + length <= mask.size());
      Episode e;
      for (std::uint64_t i = start; i < start + length; ++i) {
        if (width == 2) {
          std::uint16_t v = 0;
          std::memcpy(&v, tokens.data() + 2 * i, 2);
          e.tokens.push_back(v);
        } else {
          std::uint32_t v = 0;
          std::memcpy(&v, tokens.data() + 4 * i, 4);
          e.tokens.push_back(v);
        }
        e.mask.push_back(static_cast<std::uint8_t>(mask[i]));
      }
      episodes.push_back(std::move(e));
    }
    CHECK(expected_start == mask.size());
  }
  return episodes;
}

json read_json(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE(in);
  return json::parse(in);
}

std::string chat_line(const std::vector<std::pair<std::string, std::string>>& messages) {
  json doc;
  doc["messages"] = json::array();
  for (const auto& [role, content] : messages) doc["messages"].push_back({{"role", role}, {"content", content}});
  return doc.dump();
}

// `count` distinct conversations; some have a system message, some a tool turn.
std::vector<std::string> make_lines(std::size_t first, std::size_t count) {
  std::vector<std::string> lines;
  for (std::size_t i = first; i < first + count; ++i) {
    const std::string n = std::to_string(i);
    std::vector<std::pair<std::string, std::string>> m;
    if (i % 3 == 0) m.push_back({"system", "You answer about item " + n + "."});
    m.push_back({"user", "What is item " + n + "?"});
    if (i % 5 == 0) {
      m.push_back({"assistant", "lookup(" + n + ")"});
      m.push_back({"tool", "{\"item\": " + n + "}"});
    }
    m.push_back({"assistant", "Item " + n + " is a thing."});
    if (i % 4 == 0) {
      m.push_back({"user", "Thanks, and " + n + "+1?"});
      m.push_back({"assistant", "That would be " + std::to_string(i + 1) + "."});
    }
    lines.push_back(chat_line(m));
  }
  return lines;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string text;
  for (const std::string& l : lines) text += l + "\n";
  return text;
}

void write_gzip(const fs::path& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, text.data(), static_cast<unsigned>(text.size())) == static_cast<int>(text.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

PrepareOptions options_for(const fs::path& input, const fs::path& out) {
  PrepareOptions o;
  o.input = input;
  o.output_dir = out;
  o.threads = 2;
  return o;
}

// The parent directory holds nothing but `keep` (no temporary directories left behind).
void check_no_leftovers(const fs::path& dir, const std::set<std::string>& keep) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    CHECK_MESSAGE(keep.count(entry.path().filename().string()) == 1, "unexpected " << entry.path());
  }
}

// A pid no process can have: above the kernel's limit (PID_MAX_LIMIT, 2^22), so kill() on it
// reports ESRCH, like a run that was killed.
constexpr pid_t kDeadPid = 0x7ffffff0;

// A directory laid out as a killed run leaves its temporary output: a finished split, and one
// the dataset writer was still writing in its hidden directory.
void make_partial_output(const fs::path& dir) {
  fs::create_directories(dir / "train" / "shard_00000");
  test::write_text(dir / "train" / "shard_00000" / "tokens.bin", std::string(1000, 'x'));
  fs::create_directories(dir / ".val.tmp-123-0123456789abcdef" / "shard_00000");
  test::write_text(dir / ".val.tmp-123-0123456789abcdef" / "shard_00000" / "tokens.bin", std::string(10, 'x'));
}

// Tries to take the lock a live run holds on its temporary directory.
bool lock_is_free(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const bool acquired = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return acquired;
}

}  // namespace

TEST_CASE("prepare: sha256 matches the FIPS test vectors") {
  const auto hex = [](std::string_view s) {
    Sha256 sha;
    sha.update(s);
    return Sha256::hex(sha.finish());
  };
  CHECK(hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 pieces;  // incremental updates across block boundaries
  const std::string million(1000000, 'a');
  for (std::size_t i = 0; i < million.size(); i += 997) {
    pieces.update(std::string_view(million).substr(i, 997));
  }
  CHECK(Sha256::hex(pieces.finish()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  Sha256 empty_updates;  // zero-length updates change nothing
  empty_updates.update("", 0);
  empty_updates.update("abc");
  empty_updates.update(nullptr, 0);
  CHECK(Sha256::hex(empty_updates.finish()) == hex("abc"));
  Sha256 moved_from;
  moved_from.update("a");
  Sha256 moved = std::move(moved_from);
  moved.update("bc");
  CHECK(Sha256::hex(moved.finish()) == hex("abc"));

  test::TempDir tmp;
  test::write_text(tmp / "abc.txt", "abc");
  CHECK(sha256_file_hex(tmp / "abc.txt") == hex("abc"));
  CHECK_THROWS_WITH_AS(sha256_file_hex(tmp / "missing.txt"), doctest::Contains("missing.txt"), Error);
}

TEST_CASE("prepare: the split rule gives the values Python's hashlib computes") {
  // Reference values from an independent implementation of the documented rule
  // (prepare.hpp), Python's hashlib:
  //   h = sha256(b"tokenfeed-split-v1\0" + struct.pack("<Q", seed))
  //   per message: role, b"\0", struct.pack("<Q", len), the UTF-8 content (or each id "<I")
  //   u = (int.from_bytes(h.digest()[:8], "big") >> 11) * 2**-53
  // A change here would move conversations between train and val in existing datasets.
  ParsedConversation text;
  text.text = {{"user", "What is 2+2?"}, {"assistant", "4."}};
  CHECK(split_point(text, 7) == 0.8588484230298579);
  ParsedConversation unicode;
  unicode.text = {{"system", "Be brief."}, {"user", "h\xC3\xA9llo"}, {"assistant", "hi"}};
  CHECK(split_point(unicode, 12345678901234567890ULL) == 0.7706286696238575);
  ParsedConversation ids;
  ids.tokenized = {{"user", {100, 101}}, {"assistant", {69999}}};
  CHECK(split_point(ids, 0) == 0.15392891767699435);
}

TEST_CASE("prepare: the line reader handles newlines, BOM, CRLF, gzip and long lines") {
  test::TempDir tmp;
  const std::string text =
      "\xEF\xBB\xBF"
      "first\r\nsecond\n\nlast without newline";
  const std::vector<std::string> expected = {"first", "second", "", "last without newline"};
  const auto read_all = [](const fs::path& p, std::size_t limit, std::vector<std::uint8_t>* too_long = nullptr) {
    LineReader reader(p, limit);
    std::vector<std::string> lines;
    std::string line;
    bool tl = false;
    while (reader.next(line, tl)) {
      lines.push_back(line);
      if (too_long != nullptr) too_long->push_back(tl ? 1 : 0);
    }
    return lines;
  };
  test::write_text(tmp / "plain.txt", text);
  CHECK(read_all(tmp / "plain.txt", 1000) == expected);

  write_gzip(tmp / "plain.txt.gz", text);
  CHECK(read_all(tmp / "plain.txt.gz", 1000) == expected);
  {
    LineReader reader(tmp / "plain.txt.gz", 1000);
    CHECK(reader.is_gzip());
    std::string line;
    bool tl = false;
    while (reader.next(line, tl)) {
    }
    CHECK(reader.raw_bytes_read() == fs::file_size(tmp / "plain.txt.gz"));
    CHECK(reader.sha256_hex() == sha256_file_hex(tmp / "plain.txt.gz"));
  }

  SUBCASE("concatenated gzip members read as one stream") {
    write_gzip(tmp / "a.gz", "one\ntwo\n");
    write_gzip(tmp / "b.gz", "three\n");
    const std::vector<char> a = read_file(tmp / "a.gz"), b = read_file(tmp / "b.gz");
    std::ofstream out(tmp / "ab.gz", std::ios::binary);
    out.write(a.data(), static_cast<std::streamsize>(a.size()));
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
    out.close();
    CHECK(read_all(tmp / "ab.gz", 100) == std::vector<std::string>{"one", "two", "three"});
  }
  SUBCASE("a truncated gzip file is a format error naming the file") {
    std::string big;
    for (int i = 0; i < 20000; ++i) big += "line " + std::to_string(i * 7919) + "\n";
    write_gzip(tmp / "big.gz", big);
    std::vector<char> bytes = read_file(tmp / "big.gz");
    bytes.resize(bytes.size() / 2);
    std::ofstream out(tmp / "cut.gz", std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    CHECK_THROWS_WITH_AS(read_all(tmp / "cut.gz", 100), doctest::Contains("cut.gz"), Error);
  }
  SUBCASE("a line over the limit is flagged and skipped, the next one is read") {
    test::write_text(tmp / "long.txt", "short\n" + std::string(5000, 'x') + "\nafter\n");
    std::vector<std::uint8_t> flags;
    CHECK(read_all(tmp / "long.txt", 100, &flags) == std::vector<std::string>{"short", "", "after"});
    CHECK(flags == std::vector<std::uint8_t>{0, 1, 0});
  }
  SUBCASE("a missing file or a directory is an io error") {
    CHECK_THROWS_AS(LineReader(tmp / "missing.jsonl", 100), Error);
    CHECK_THROWS_WITH_AS(LineReader(tmp.path(), 100), doctest::Contains("directory"), Error);
  }
}

TEST_CASE("prepare-text: byte ranges of a file, cut anywhere, give every line exactly once") {
  test::TempDir tmp;
  // Empty lines (runs of them, skipped as runs), CRLF, a BOM, a line longer than the limit,
  // no final newline.
  const std::string text =
      "\xEF\xBB\xBF"
      "first\r\n\n\n\nsecond line\n" +
      std::string(300, 'x') + "\nthird\r\n\nlast";
  test::write_text(tmp / "lines.txt", text);
  const auto read_range = [&](std::uint64_t begin, std::uint64_t end) {
    LineReader reader(tmp / "lines.txt", 100, begin, end);
    std::vector<std::string> lines;
    std::string line;
    bool too_long = false;
    for (;;) {
      const std::uint64_t empty = reader.skip_empty_lines(2);
      lines.insert(lines.end(), empty, std::string());
      if (!reader.next(line, too_long)) break;
      lines.push_back(too_long ? "<long>" : line);
    }
    return lines;
  };
  const std::vector<std::string> whole = read_range(0, text.size());
  CHECK(whole == std::vector<std::string>{"first", "", "", "", "second line", "<long>", "third", "", "last"});
  for (std::uint64_t a = 0; a <= text.size(); ++a) {
    // The second cut just after the first, a line or so later, and far off.
    for (const std::uint64_t step : {0, 1, 13, 400}) {
      const std::uint64_t b = std::min<std::uint64_t>(a + step, text.size());
      std::vector<std::string> lines = read_range(0, a);
      for (const auto& [from, to] : {std::pair{a, b}, std::pair{b, std::uint64_t{text.size()}}}) {
        const std::vector<std::string> more = read_range(from, to);
        lines.insert(lines.end(), more.begin(), more.end());
      }
      CHECK_MESSAGE(lines == whole, "cut at " << a << " and " << b);
    }
  }
  write_gzip(tmp / "lines.gz", text);
  CHECK_THROWS_WITH_AS(LineReader(tmp / "lines.gz", 100, 10, 20), doctest::Contains("compressed"), Error);
}

TEST_CASE("prepare: each bad-line case gets its own reason") {
  ParsedConversation c;
  const auto reason = [&](std::string_view line, ConversationInput in = ConversationInput::text) {
    const auto d = parse_conversation_line(line, in, c);
    return d ? d->reason : std::string("ok");
  };
  CHECK(reason(R"({"messages": [{"role": "user", "content": "hi"}]})") == "ok");
  CHECK(c.text.size() == 1);
  CHECK(reason(R"({"messages": [{"role": "user", "content": "hi"})") == "invalid_json");
  CHECK(reason("not json") == "invalid_json");
  CHECK(reason("{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\"}]}") == "invalid_json");  // not UTF-8
  CHECK(reason(R"([1, 2])") == "wrong_type");
  CHECK(reason(R"({"conversation": []})") == "missing_field");
  CHECK(reason(R"({"messages": {"role": "user"}})") == "wrong_type");
  CHECK(reason(R"({"messages": ["hi"]})") == "wrong_type");
  CHECK(reason(R"({"messages": [{"content": "hi"}]})") == "missing_field");
  CHECK(reason(R"({"messages": [{"role": 1, "content": "hi"}]})") == "wrong_type");
  CHECK(reason(R"({"messages": [{"role": "user"}]})") == "missing_field");
  CHECK(reason(R"({"messages": [{"role": "user", "content": null}]})") == "wrong_type");
  CHECK(reason(R"({"messages": [{"role": "user", "ids": [1, 2]}]})") == "missing_field");

  CHECK(reason(R"({"messages": [{"role": "user", "ids": [1, 2]}]})", ConversationInput::token_ids) == "ok");
  CHECK(c.tokenized.at(0).ids == Ids{1, 2});
  CHECK(reason(R"({"messages": [{"role": "user", "content": "x"}]})", ConversationInput::token_ids) == "missing_field");
  CHECK(reason(R"({"messages": [{"role": "user", "ids": [1, -2]}]})", ConversationInput::token_ids) == "wrong_type");
  CHECK(reason(R"({"messages": [{"role": "user", "ids": [1.5]}]})", ConversationInput::token_ids) == "wrong_type");
  CHECK(reason(R"({"messages": [{"role": "user", "ids": [4294967296]}]})", ConversationInput::token_ids) ==
        "wrong_type");
  CHECK(reason(R"({"messages": [{"role": "user", "ids": "1 2"}]})", ConversationInput::token_ids) == "wrong_type");

  const auto d = parse_conversation_line(R"({"messages": [{"role": "user", "content": "a"}, {"role": "x"}]})",
                                         ConversationInput::text, c);
  REQUIRE(d);
  CHECK(d->detail == "message 2 has no \"content\"");
}

TEST_CASE("prepare: content given as text parts is joined, other content is refused, naming the message") {
  ParsedConversation c;
  const auto parse = [&](std::string_view line) { return parse_conversation_line(line, ConversationInput::text, c); };
  REQUIRE_FALSE(parse(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hel"}, {"type": "text", "text": "lo"}]},)"
      R"( {"role": "assistant", "content": []}]})"));
  CHECK(c.text.at(0).content == "Hello");
  CHECK(c.text.at(1).content.empty());
  const auto refused = [&](std::string_view line, std::string_view detail) {
    CAPTURE(line);
    const auto d = parse(line);
    REQUIRE(d);
    CHECK(d->reason == "wrong_type");
    CHECK(d->detail.find(detail) != std::string::npos);
  };
  refused(R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": null}]})",
          "message 2 \"content\" is null");
  refused(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
          "message 1 content part 1 has type \"image_url\"");
  refused(R"({"messages": [{"role": "user", "content": ["hi"]}]})", "message 1 content part 1 is a string");
  refused(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "has no string \"text\"");
  refused(R"({"messages": [{"role": "user", "content": {"text": "hi"}}]})", "is an object");
}

TEST_CASE("prepare: OpenAI messages in full (weight, developer, text parts, tool_calls, no system turn)") {
  test::TempDir tmp;
  const std::vector<std::string> lines = {
      // weight 0: the first assistant reply stays in the row but is not trained on.
      R"({"messages": [{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "a"},)"
      R"( {"role": "assistant", "content": "bad", "weight": 0}, {"role": "user", "content": "b"},)"
      R"( {"role": "assistant", "content": [{"type": "text", "text": "go"}, {"type": "text", "text": "od"}], "weight": 1}]})",
      // tool_calls with content null, then the tool's reply and the answer.
      R"({"messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": null, "tool_calls":)"
      R"( [{"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"q\": 1, \"city\": \"Paris\"}"}}]},)"
      R"( {"role": "tool", "tool_call_id": "call_9", "content": "sunny"}, {"role": "assistant", "content": "Sunny."}]})",
  };
  test::write_text(tmp / "chats.jsonl", join_lines(lines));
  PrepareOptions o = options_for(tmp / "chats.jsonl", tmp / "ds");
  o.val_split = 0.0;
  o.system_text = "";  // no system turn at all when a conversation has none
  prepare_chat_dataset(o);
  const std::vector<Episode> train = read_split(tmp / "ds" / "train", TokenDtype::uint16);
  REQUIRE(train.size() == 2);
  const SpecialTokenStrings str;
  const auto text_of = [](const Episode& e, bool trained_only) {
    std::string t;
    const auto tok = make_tokenizer("bytes");
    for (std::size_t i = 0; i < e.tokens.size(); ++i) {
      if (!trained_only || e.mask[i]) t += tok->decode(std::span<const std::uint32_t>(&e.tokens[i], 1));
    }
    return t;
  };
  CHECK(text_of(train[0], false) == str.system + "Be brief." + str.eot + str.user + "a" + str.eot + str.assistant +
                                        "bad" + str.eot + str.user + "b" + str.eot + str.assistant + "good" + str.eot);
  CHECK(text_of(train[0], true) == "good" + str.eot);
  const std::string call = R"({"name": "get_weather", "arguments": {"city":"Paris","q":1}})";
  CHECK(text_of(train[1], false) == str.user + "Weather?" + str.eot + str.assistant + call + str.eot + str.tool +
                                        "sunny" + str.eot + str.assistant + "Sunny." + str.eot);
  CHECK(text_of(train[1], true) == call + str.eot + "Sunny." + str.eot);
}

TEST_CASE("prepare: bad weight and tool_calls are refused, naming the message") {
  ParsedConversation c;
  const auto detail = [&](std::string_view line, ConversationInput in = ConversationInput::text) {
    const auto d = parse_conversation_line(line, in, c);
    REQUIRE(d);
    CHECK(d->reason == "wrong_type");
    return d->detail;
  };
  CHECK(detail(R"({"messages": [{"role": "assistant", "content": "x", "weight": 0.5}]})") ==
        "message 1 \"weight\" is 0.5, expected 0 or 1");
  CHECK(detail(R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})").find("only assistant") !=
        std::string::npos);
  CHECK(detail(R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"type": "function"}]}]})") ==
        "message 1 tool call 1 is not an object with a \"function\" object");
  CHECK(detail(R"({"messages": [{"role": "assistant", "content": null}]})") ==
        "message 1 \"content\" is null, expected a string or a list of text parts");
  CHECK(detail(R"({"messages": [{"role": "assistant", "ids": [1], "tool_calls": []}]})", ConversationInput::token_ids)
            .find("pre-tokenized") != std::string::npos);
  REQUIRE_FALSE(parse_conversation_line(R"({"messages": [{"role": "assistant", "ids": [1], "weight": 0}]})",
                                        ConversationInput::token_ids, c));
  CHECK_FALSE(c.tokenized.at(0).trained);
}

TEST_CASE("prepare: a bad line fails the run with its line number and leaves no output") {
  struct Case {
    const char* line;
    const char* reason;
  };
  const Case cases[] = {
      {"{not json", "invalid_json"},
      {R"({"msgs": []})", "missing_field"},
      {R"({"messages": [{"role": "user"}]})", "missing_field"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "wrong_type"},
      {R"({"messages": [{"role": "bot", "content": "hi"}, {"role": "assistant", "content": "x"}]})", "unknown_role"},
      {R"({"messages": [{"role": "user", "content": "hi"}]})", "no_assistant_turn"},
      {R"({"messages": []})", "empty_conversation"},
      {R"({"messages": [{"role": "user", "content": "a"}, {"role": "system", "content": "b"}, {"role": "assistant", "content": "c"}]})",
       "misplaced_system"},
  };
  const std::vector<std::string> good = make_lines(0, 5);
  for (const Case& c : cases) {
    CAPTURE(c.reason);
    test::TempDir tmp;
    std::vector<std::string> lines = good;
    lines.insert(lines.begin() + 3, c.line);  // line 4
    test::write_text(tmp / "in.jsonl", join_lines(lines));
    PrepareOptions o = options_for(tmp / "in.jsonl", tmp / "out");
    const std::string what = test::error_of([&] { prepare_chat_dataset(o); }, ErrorKind::format);
    CHECK(what.find("in.jsonl:4: ") != std::string::npos);
    CHECK(what.find(std::string(c.reason) + ": ") != std::string::npos);
    CHECK(what.find('\n') == std::string::npos);
    CHECK_FALSE(fs::exists(tmp / "out"));
    check_no_leftovers(tmp.path(), {"in.jsonl"});

    // With skip, the same line is counted under its reason, in the summary and the metadata.
    o.on_error = OnBadLine::skip;
    const PrepareSummary s = prepare_chat_dataset(o);
    CHECK(s.conversations == 5);
    CHECK(s.skipped_total == 1);
    REQUIRE(s.skipped.count(c.reason) == 1);
    CHECK(s.skipped.at(c.reason).count == 1);
    CHECK(s.skipped.at(c.reason).first_line == 4);
    const json meta = read_json(tmp / "out" / "dataset_metadata.json");
    CHECK(meta["skipped"][c.reason] == 1);
    CHECK(meta["splits"]["train"]["episodes"].get<int>() + meta["splits"]["val"]["episodes"].get<int>() == 5);
  }
}

TEST_CASE("prepare: skip counts several reasons, blank lines are ignored") {
  test::TempDir tmp;
  std::vector<std::string> lines = make_lines(0, 4);
  lines.insert(lines.begin() + 1, "");
  lines.insert(lines.begin() + 2, "garbage");
  lines.insert(lines.begin() + 3, "   ");
  lines.push_back(R"({"messages": [{"role": "assistant", "content": "x"}, {"role": "narrator", "content": "y"}]})");
  lines.push_back("also garbage");
  test::write_text(tmp / "in.jsonl", join_lines(lines));
  PrepareOptions o = options_for(tmp / "in.jsonl", tmp / "out");
  o.on_error = OnBadLine::skip;
  const PrepareSummary s = prepare_chat_dataset(o);
  CHECK(s.lines == 9);
  CHECK(s.blank_lines == 2);
  CHECK(s.conversations == 4);
  CHECK(s.skipped_total == 3);
  CHECK(s.skipped.at("invalid_json").count == 2);
  CHECK(s.skipped.at("invalid_json").first_line == 3);
  CHECK(s.skipped.at("unknown_role").count == 1);
  CHECK(s.skipped.at("unknown_role").first_line == 8);
  const json meta = read_json(tmp / "out" / "dataset_metadata.json");
  CHECK(meta["skipped"]["invalid_json"] == 2);
  CHECK(meta["skipped"]["unknown_role"] == 1);
  CHECK(meta["skipped"]["no_assistant_turn"] == 0);
}

TEST_CASE("prepare: end to end, a row decodes back to its conversation with the mask on assistant replies") {
  test::TempDir tmp;
  struct Chat {
    std::vector<std::pair<std::string, std::string>> messages;
  };
  const std::vector<Chat> chats = {
      {{{"user", "What is the capital of France?"}, {"assistant", "Paris."}}},
      {{{"system", "You are a pirate."},
        {"user", "Hello"},
        {"assistant", "Ahoy, matey!"},
        {"user", "Where is the treasure?"},
        {"assistant", "Buried on Skull Island, naturally."}}},
      {{{"user", "Weather in Zürich?"},
        {"assistant", "get_weather(\"Zürich\")"},
        {"tool", "{\"temp_c\": 4, \"sky\": \"cloudy\"}"},
        {"assistant", "It is 4 °C and cloudy."}}},
  };
  std::vector<std::string> lines;
  for (const Chat& c : chats) lines.push_back(chat_line(c.messages));
  test::write_text(tmp / "chats.jsonl", join_lines(lines));

  PrepareOptions o = options_for(tmp / "chats.jsonl", tmp / "ds");
  o.val_split = 0.0;  // everything in train, in input order
  o.system_text = "Be helpful.";
  const PrepareSummary s = prepare_chat_dataset(o);
  CHECK(s.conversations == 3);
  CHECK(s.token_dtype == TokenDtype::uint16);

  const auto tok = make_tokenizer("bytes");
  const SpecialTokenStrings str;
  const std::vector<Episode> train = read_split(tmp / "ds" / "train", TokenDtype::uint16);
  CHECK_FALSE(fs::exists(tmp / "ds" / "val"));  // no episode in val: the split is not written
  REQUIRE(train.size() == chats.size());

  std::uint64_t total_tokens = 0, total_masked = 0;
  for (std::size_t i = 0; i < chats.size(); ++i) {
    CAPTURE(i);
    const Episode& e = train[i];
    // The whole row decodes to the template text of the conversation.
    std::string expected;
    std::string expected_trained;
    if (chats[i].messages.front().first != "system") expected += str.system + "Be helpful." + str.eot;
    for (const auto& [role, content] : chats[i].messages) {
      const std::string& marker = role == "system"      ? str.system
                                  : role == "user"      ? str.user
                                  : role == "assistant" ? str.assistant
                                                        : str.tool;
      expected += marker + content + str.eot;
      if (role == "assistant") expected_trained += content + str.eot;
    }
    CHECK(tok->decode(e.tokens) == expected);
    // The mask is exactly on assistant replies and their end-of-turn tokens.
    Ids trained;
    for (std::size_t k = 0; k < e.tokens.size(); ++k) {
      if (e.mask[k] != 0) trained.push_back(e.tokens[k]);
      CHECK(e.mask[k] <= 1);
    }
    CHECK(tok->decode(trained) == expected_trained);
    // And it is the scan of the ids.
    CHECK(e.mask == sft_loss_mask_for_ids(e.tokens, tok->special_ids()));
    total_tokens += e.tokens.size();
    total_masked += trained.size();
  }

  const json meta = read_json(tmp / "ds" / "dataset_metadata.json");
  CHECK(meta["format_version"] == 1);
  CHECK(meta["token_dtype"] == "uint16");
  CHECK(meta["mask_dtype"] == "uint8");
  CHECK(meta["vocab_size"] == 261);
  CHECK(meta["eot_token_id"] == 260);
  CHECK(meta["special_tokens"] ==
        json{{"system", 256}, {"user", 257}, {"assistant", 258}, {"tool", 259}, {"eot", 260}});
  CHECK(meta["splits"]["train"]["episodes"] == 3);
  CHECK(meta["splits"]["train"]["tokens"] == total_tokens);
  CHECK(meta["splits"]["train"]["masked_tokens"] == total_masked);
  CHECK(meta["splits"]["val"]["episodes"] == 0);
  CHECK(meta["splits"]["val"]["shards"] == 0);
  CHECK(meta["source"]["file"] == "chats.jsonl");
  CHECK(meta["source"]["sha256"] == sha256_file_hex(tmp / "chats.jsonl"));
  const json state = read_json(tmp / "ds" / "tokenizer_state.json");
  CHECK(state["kind"] == "bytes");
  CHECK(state["special_tokens"]["eot"]["id"] == 260);
  CHECK(state["special_tokens"]["eot"]["text"] == str.eot);
  CHECK(state["default_system_text"] == "Be helpful.");
  check_no_leftovers(tmp.path(), {"chats.jsonl", "ds"});
}

TEST_CASE("prepare: end to end through the loader (sft_episode, loss mask) trains on assistant replies only") {
  test::TempDir tmp;
  const std::vector<std::vector<std::pair<std::string, std::string>>> chats = {
      {{"user", "Name a prime number."}, {"assistant", "Seven."}},
      {{"system", "Answer in French."},
       {"user", "Hello?"},
       {"assistant", "Bonjour !"},
       {"user", "Thanks"},
       {"assistant", "De rien."}},
      {{"user", "Sum 2 and 3."}, {"assistant", "add(2, 3)"}, {"tool", "5"}, {"assistant", "It is 5."}},
  };
  std::vector<std::string> lines;
  for (const auto& c : chats) lines.push_back(chat_line(c));
  test::write_text(tmp / "chats.jsonl", join_lines(lines));
  PrepareOptions o = options_for(tmp / "chats.jsonl", tmp / "ds");
  o.val_split = 0.0;
  prepare_chat_dataset(o);

  Config config;
  config.dataset_dir = tmp / "ds";
  config.dataset_mode = DatasetMode::sft_episode;
  config.batch_size = 3;
  config.block_size = 256;  // longer than every episode: no truncation
  config.use_loss_mask = true;
  config.epoch_drop_last = false;
  config.audit_log_dir.clear();
  config.decode_threads = 1;
  config.prefetch_depth = 2;
  Loader loader(config);
  CHECK(loader.config().pad_token_id == 260);  // eot_token_id from dataset_metadata.json
  Batch batch = loader.get_batch("train");
  REQUIRE(batch.has_mask());
  REQUIRE(batch.real_rows() == 3);

  const auto tok = make_tokenizer("bytes");
  const SpecialTokenStrings str;
  const std::size_t T = batch.cols();
  std::set<std::int64_t> seen;
  for (std::size_t r = 0; r < batch.rows(); ++r) {
    const std::int64_t episode = batch.episode_ids()[r];
    REQUIRE(episode >= 0);
    REQUIRE(episode < 3);
    seen.insert(episode);
    const auto& chat = chats[static_cast<std::size_t>(episode)];
    std::string expected_text, expected_trained;
    if (chat.front().first != "system") expected_text += str.system + std::string(kDefaultSystemText) + str.eot;
    for (const auto& [role, content] : chat) {
      expected_text += (role == "system"      ? str.system
                        : role == "user"      ? str.user
                        : role == "assistant" ? str.assistant
                                              : str.tool) +
                       content + str.eot;
      if (role == "assistant") expected_trained += content + str.eot;
    }
    Ids x, trained;
    for (std::size_t i = 0; i < T; ++i) {
      x.push_back(static_cast<std::uint32_t>(batch.x()[r * T + i]));
      if (batch.mask()[r * T + i] != 0.0f) trained.push_back(static_cast<std::uint32_t>(batch.y()[r * T + i]));
    }
    // x is the episode followed by padding (eot); the masked targets are exactly the replies.
    const std::string decoded = tok->decode(x);
    REQUIRE(decoded.size() >= expected_text.size());
    CHECK(decoded.substr(0, expected_text.size()) == expected_text);
    CHECK(tok->decode(trained) == expected_trained);
  }
  CHECK(seen.size() == 3);
}

TEST_CASE("prepare: the split depends on content and seed only, appending lines moves nothing") {
  test::TempDir tmp;
  const std::vector<std::string> first = make_lines(0, 300);
  const std::vector<std::string> more = make_lines(300, 200);
  std::vector<std::string> all = first;
  all.insert(all.end(), more.begin(), more.end());
  test::write_text(tmp / "a.jsonl", join_lines(first));
  test::write_text(tmp / "b.jsonl", join_lines(all));

  const auto run = [&](const fs::path& input, const std::string& out, std::uint64_t seed) {
    PrepareOptions o = options_for(input, tmp / out);
    o.val_split = 0.25;
    o.seed = seed;
    o.batch_bytes = 2048;  // many batches in flight: order must still hold
    prepare_chat_dataset(o);
    std::set<Ids> val;
    for (Episode& e : read_split(tmp / out / "val", TokenDtype::uint16)) val.insert(std::move(e.tokens));
    std::vector<Ids> train;
    for (Episode& e : read_split(tmp / out / "train", TokenDtype::uint16)) train.push_back(std::move(e.tokens));
    return std::pair{std::move(train), std::move(val)};
  };
  const auto [train_a, val_a] = run(tmp / "a.jsonl", "a", 7);
  const auto [train_b, val_b] = run(tmp / "b.jsonl", "b", 7);
  const auto [train_a2, val_a2] = run(tmp / "a.jsonl", "a2", 7);
  const auto [train_s, val_s] = run(tmp / "a.jsonl", "s", 8);

  CHECK(train_a.size() + val_a.size() == 300);
  CHECK(val_a.size() > 300 * 0.15);
  CHECK(val_a.size() < 300 * 0.35);
  // Rerunning gives the same assignment, byte for byte.
  CHECK(train_a == train_a2);
  CHECK(val_a == val_a2);
  // Appending lines moves nothing: the first run's train is a prefix of the second's and its val
  // a subset.
  REQUIRE(train_b.size() >= train_a.size());
  CHECK(std::equal(train_a.begin(), train_a.end(), train_b.begin()));
  for (const Ids& v : val_a) CHECK(val_b.count(v) == 1);
  CHECK(train_b.size() + val_b.size() == 500);
  // Another seed gives another assignment.
  CHECK(val_s != val_a);

  // The rule itself, on parsed conversations: content and seed, nothing else.
  ParsedConversation c1, c2;
  REQUIRE_FALSE(parse_conversation_line(first[0], ConversationInput::text, c1));
  REQUIRE_FALSE(
      parse_conversation_line(R"({ "id": 99, "messages" : )" + first[0].substr(12), ConversationInput::text, c2));
  CHECK(split_point(c1, 7) == split_point(c2, 7));  // formatting and extra keys do not matter
  CHECK(split_point(c1, 7) != split_point(c1, 8));
  CHECK(split_point(c1, 7) >= 0.0);
  CHECK(split_point(c1, 7) < 1.0);
  CHECK_FALSE(split_is_val(c1, 7, 0.0));
  CHECK(split_is_val(c1, 7, 1.0));
}

TEST_CASE("prepare: gzip input gives the same dataset, shards never split an episode") {
  test::TempDir tmp;
  const std::vector<std::string> lines = make_lines(0, 120);
  test::write_text(tmp / "in.jsonl", join_lines(lines));
  write_gzip(tmp / "in.jsonl.gz", join_lines(lines));

  PrepareOptions plain = options_for(tmp / "in.jsonl", tmp / "plain");
  PrepareOptions gz = options_for(tmp / "in.jsonl.gz", tmp / "gz");
  gz.shard_tokens = 2000;
  gz.token_dtype = TokenDtype::uint32;
  const PrepareSummary sp = prepare_chat_dataset(plain);
  const PrepareSummary sg = prepare_chat_dataset(gz);
  CHECK(sp.train.episodes == sg.train.episodes);
  CHECK(sp.train.tokens == sg.train.tokens);
  CHECK(sp.train.shards == 1);
  CHECK(sg.train.shards > 1);

  const auto tp = read_split(tmp / "plain" / "train", TokenDtype::uint16);
  const auto tg = read_split(tmp / "gz" / "train", TokenDtype::uint32);
  REQUIRE(tp.size() == tg.size());
  for (std::size_t i = 0; i < tp.size(); ++i) {
    CHECK(tp[i].tokens == tg[i].tokens);
    CHECK(tp[i].mask == tg[i].mask);
  }
  for (const auto& entry : fs::directory_iterator(tmp / "gz" / "train")) {
    CHECK(fs::file_size(entry.path() / "tokens.bin") <= 2000 * 4);
  }
  const json meta = read_json(tmp / "gz" / "dataset_metadata.json");
  CHECK(meta["token_dtype"] == "uint32");
  CHECK(meta["source"]["gzip"] == true);
  CHECK(meta["source"]["sha256"] == sha256_file_hex(tmp / "in.jsonl.gz"));
}

TEST_CASE("prepare: pre-tokenized input with --special-tokens") {
  test::TempDir tmp;
  test::write_text(tmp / "special.json",
                   R"({"system": 1, "user": 2, "assistant": 3, "tool": 4, "eot": 0, "default_system_ids": [7, 8],
                       "vocab_size": 70000})");
  test::write_text(tmp / "in.jsonl",
                   R"({"messages": [{"role": "user", "ids": [100, 101]}, {"role": "assistant", "ids": [69999]}]})"
                   "\n"
                   R"({"messages": [{"role": "user", "ids": [100]}, {"role": "assistant", "ids": [70000]}]})"
                   "\n"
                   R"({"messages": [{"role": "user", "ids": [100, 0]}, {"role": "assistant", "ids": [5]}]})"
                   "\n");
  PrepareOptions o = options_for(tmp / "in.jsonl", tmp / "out");
  o.special_tokens_file = tmp / "special.json";
  o.on_error = OnBadLine::skip;
  o.val_split = 0.0;

  SUBCASE("a vocabulary over 65536 ids needs uint32") {
    o.token_dtype = TokenDtype::uint16;
    CHECK_THROWS_WITH_AS(prepare_chat_dataset(o), doctest::Contains("uint16"), Error);
    CHECK_FALSE(fs::exists(tmp / "out"));
  }
  SUBCASE("ids are checked and written as given") {
    const PrepareSummary s = prepare_chat_dataset(o);
    CHECK(s.token_dtype == TokenDtype::uint32);  // auto: the vocabulary does not fit uint16
    CHECK(s.conversations == 1);
    CHECK(s.skipped.at("id_out_of_range").first_line == 2);
    CHECK(s.skipped.at("special_token_in_content").first_line == 3);
    const auto train = read_split(tmp / "out" / "train", TokenDtype::uint32);
    REQUIRE(train.size() == 1);
    CHECK(train[0].tokens == Ids{1, 7, 8, 0, 2, 100, 101, 0, 3, 69999, 0});
    CHECK(train[0].mask == std::vector<std::uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1});
    const json meta = read_json(tmp / "out" / "dataset_metadata.json");
    CHECK(meta["vocab_size"] == 70000);
    CHECK(meta["eot_token_id"] == 0);
    const json state = read_json(tmp / "out" / "tokenizer_state.json");
    CHECK(state["kind"] == "pretokenized");
    CHECK(state["default_system_ids"] == json{7, 8});
  }
  SUBCASE("a bad special-tokens file is a configuration error naming it") {
    test::write_text(tmp / "special.json", R"({"system": 1, "user": 1, "assistant": 3, "eot": 0, "vocab_size": 10})");
    CHECK_THROWS_WITH_AS(prepare_chat_dataset(o), doctest::Contains("special.json"), Error);
    test::write_text(tmp / "special.json", R"({"system": 1, "user": 2, "assistant": 3, "eot": 0})");
    CHECK_THROWS_WITH_AS(prepare_chat_dataset(o), doctest::Contains("vocab_size"), Error);
  }
}

TEST_CASE("prepare: options and the output directory are checked before any work") {
  test::TempDir tmp;
  test::write_text(tmp / "in.jsonl", join_lines(make_lines(0, 3)));
  PrepareOptions o = options_for(tmp / "in.jsonl", tmp / "out");

  SUBCASE("an existing non-empty output directory is never touched") {
    test::write_text(tmp / "out" / "keep.txt", "mine");
    CHECK_THROWS_WITH_AS(prepare_chat_dataset(o), doctest::Contains("not empty"), Error);
    CHECK(fs::exists(tmp / "out" / "keep.txt"));
  }
  SUBCASE("an existing empty output directory is filled") {
    fs::create_directories(tmp / "out");
    o.output_dir = tmp / "out/";
    CHECK(prepare_chat_dataset(o).conversations == 3);
    CHECK(fs::exists(tmp / "out" / "dataset_metadata.json"));
  }
  SUBCASE("bad values") {
    o.val_split = 1.5;
    CHECK_THROWS_AS(prepare_chat_dataset(o), Error);
    o.val_split = 0.1;
    o.tokenizer = "wordpiece";
    CHECK_THROWS_WITH_AS(prepare_chat_dataset(o), doctest::Contains("wordpiece"), Error);
    o.tokenizer = "bytes";
    o.input = tmp / "missing.jsonl";
    CHECK_THROWS_AS(prepare_chat_dataset(o), Error);
  }
  check_no_leftovers(tmp.path(), {"in.jsonl", "out"});
}

TEST_CASE("prepare: progress is reported and the output keeps input order across many batches") {
  test::TempDir tmp;
  const std::vector<std::string> lines = make_lines(0, 2000);
  test::write_text(tmp / "in.jsonl", join_lines(lines));
  PrepareOptions o = options_for(tmp / "in.jsonl", tmp / "out");
  o.val_split = 0.0;
  o.batch_bytes = 512;
  o.threads = 2;
  o.progress_interval_seconds = 0.0;
  std::uint64_t calls = 0, last_lines = 0;
  bool monotonic = true;
  o.on_progress = [&](const PrepareProgress& p) {
    ++calls;
    monotonic = monotonic && p.lines >= last_lines;
    last_lines = p.lines;
  };
  const PrepareSummary s = prepare_chat_dataset(o);
  CHECK(calls > 1);
  CHECK(monotonic);
  CHECK(last_lines == 2000);
  CHECK(s.conversations == 2000);

  const auto tok = make_tokenizer("bytes");
  const auto train = read_split(tmp / "out" / "train", TokenDtype::uint16);
  REQUIRE(train.size() == lines.size());
  for (std::size_t i = 0; i < lines.size(); i += 97) {
    ParsedConversation c;
    REQUIRE_FALSE(parse_conversation_line(lines[i], ConversationInput::text, c));
    CHECK(train[i].tokens == serialize_chat_to_ids(c.text, *tok));
  }
}

TEST_CASE("prepare: special token strings come from a JSON file and reach tokenizer_state.json") {
  test::TempDir tmp;
  test::write_text(tmp / "strings.json", R"({"tool": "<|tool|>", "eot": "<|end|>"})");
  const SpecialTokenStrings strings = read_special_token_strings(tmp / "strings.json");
  CHECK(strings.tool == "<|tool|>");
  CHECK(strings.eot == "<|end|>");
  CHECK(strings.user == SpecialTokenStrings{}.user);  // absent keys keep their defaults

  test::write_text(tmp / "in.jsonl", join_lines(make_lines(0, 3)));
  PrepareOptions o = options_for(tmp / "in.jsonl", tmp / "out");
  o.special_strings = strings;
  prepare_chat_dataset(o);
  const json state = read_json(tmp / "out" / "tokenizer_state.json");
  CHECK(state["special_tokens"]["tool"]["text"] == "<|tool|>");
  CHECK(state["special_tokens"]["eot"]["text"] == "<|end|>");
  CHECK(state["special_tokens"]["eot"]["id"] == 260);

  test::write_text(tmp / "bad.json", R"({"eos": "<|end|>"})");
  CHECK_THROWS_WITH_AS(read_special_token_strings(tmp / "bad.json"), doctest::Contains("unknown key \"eos\""), Error);
  test::write_text(tmp / "bad.json", R"({"eot": 5})");
  CHECK_THROWS_WITH_AS(read_special_token_strings(tmp / "bad.json"), doctest::Contains("must be a string"), Error);
}

TEST_CASE("prepare: the temporary directory is named per run, locked while alive, and removed unless committed") {
  test::TempDir tmp;
  const fs::path out = tmp / "data";
  fs::path first_path;
  {
    StagingDir first(out);
    StagingDir second(out);  // the same process twice: distinct names
    first_path = first.path();
    CHECK(first.path().parent_path() == tmp.path());
    const std::string name = first.path().filename().string();
    const std::string prefix = ".data.tmp-" + std::to_string(::getpid()) + "-";
    REQUIRE(name.starts_with(prefix));
    CHECK(name.size() == prefix.size() + 16);
    CHECK(first.path() != second.path());
    CHECK(fs::is_directory(first.path()));
    CHECK_FALSE(lock_is_free(first.path()));  // held by the live run
    make_partial_output(first.path());
  }
  CHECK_FALSE(fs::exists(first_path));  // not committed: removed with its content
  check_no_leftovers(tmp.path(), {});

  SUBCASE("commit renames it into place with its content") {
    StagingDir staging(out);
    make_partial_output(staging.path());
    staging.commit();
    CHECK(fs::file_size(out / "train" / "shard_00000" / "tokens.bin") == 1000);
    check_no_leftovers(tmp.path(), {"data"});
  }
  SUBCASE("an empty directory in the way is replaced; a non-empty one is an error") {
    fs::create_directories(out);
    {
      StagingDir staging(out);
      make_partial_output(staging.path());
      staging.commit();
    }
    CHECK(fs::exists(out / "train"));
    StagingDir again(out);
    make_partial_output(again.path());
    CHECK_THROWS_WITH_AS(again.commit(), doctest::Contains("cannot rename"), Error);
  }
}

TEST_CASE("prepare: temporary directories of killed runs are removed, never a live run's or a stranger's") {
  test::TempDir tmp;
  const fs::path out = tmp / "data";
  const std::string dead = std::to_string(kDeadPid);
  const std::string self = std::to_string(::getpid());
  // Left by runs that are gone: removed.
  make_partial_output(tmp / (".data.tmp-" + dead + "-0123456789abcdef"));
  make_partial_output(tmp / (".data.tmp-" + dead));  // the naming of earlier versions
  fs::create_directories(tmp / (".data.tmp-" + self + "-00000000deadbeef"));  // this pid, unlocked: an
                                                                              // earlier process's
  test::write_text(tmp / (".data.tmp-" + self + "-00000000deadbeef") / "dataset_metadata.json", "{}");
  // Kept: a live pid (init), a dead pid whose lock is held (a run elsewhere on a shared
  // filesystem), a directory with files prepare never writes, a symlink, another output's.
  make_partial_output(tmp / ".data.tmp-1-aaaaaaaaaaaaaaaa");
  make_partial_output(tmp / (".data.tmp-" + dead + "-bbbbbbbbbbbbbbbb"));
  const int held = ::open((tmp / (".data.tmp-" + dead + "-bbbbbbbbbbbbbbbb")).c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX | LOCK_NB) == 0);
  make_partial_output(tmp / (".data.tmp-" + dead + "-cccccccccccccccc"));
  test::write_text(tmp / (".data.tmp-" + dead + "-cccccccccccccccc") / "notes.txt", "mine");
  fs::create_directory_symlink(tmp / (".data.tmp-" + dead + "-cccccccccccccccc"),
                               tmp / (".data.tmp-" + dead + "-dddddddddddddddd"));
  make_partial_output(tmp / (".other.tmp-" + dead + "-eeeeeeeeeeeeeeee"));
  make_partial_output(tmp / (".data.tmp-x" + dead));  // not a pid
  // A live run of this process, in the middle of writing.
  StagingDir live(out);
  make_partial_output(live.path());

  std::vector<fs::path> removed;
  SUBCASE("by remove_stale_staging_dirs") { removed = remove_stale_staging_dirs(out); }
  SUBCASE("by the next prepare into the same output") {
    test::write_text(tmp / "in.jsonl", join_lines(make_lines(0, 5)));
    PrepareOptions o = options_for(tmp / "in.jsonl", out);
    o.val_split = 0.0;
    const PrepareSummary s = prepare_chat_dataset(o);
    removed = s.removed_stale_dirs;
    CHECK(fs::exists(out / "dataset_metadata.json"));
  }
  std::vector<fs::path> expected = {tmp / (".data.tmp-" + dead), tmp / (".data.tmp-" + dead + "-0123456789abcdef"),
                                    tmp / (".data.tmp-" + self + "-00000000deadbeef")};
  std::sort(removed.begin(), removed.end());
  std::sort(expected.begin(), expected.end());
  CHECK(removed == expected);
  for (const fs::path& p : removed) CHECK_FALSE(fs::exists(p));
  const std::vector<std::string> kept_names = {
      ".data.tmp-1-aaaaaaaaaaaaaaaa", ".data.tmp-" + dead + "-bbbbbbbbbbbbbbbb", ".data.tmp-" + dead + "-cccccccccccccccc",
      ".other.tmp-" + dead + "-eeeeeeeeeeeeeeee", ".data.tmp-x" + dead};
  for (const std::string& kept : kept_names) {
    CAPTURE(kept);
    CHECK(fs::exists(tmp / kept / "train" / "shard_00000" / "tokens.bin"));
  }
  CHECK(fs::is_symlink(tmp / (".data.tmp-" + dead + "-dddddddddddddddd")));
  CHECK(fs::exists(live.path() / "train" / "shard_00000" / "tokens.bin"));
  CHECK_FALSE(lock_is_free(live.path()));
  ::close(held);
  // Once its holder is gone, the locked one is stale too.
  CHECK(remove_stale_staging_dirs(out) == std::vector<fs::path>{tmp / (".data.tmp-" + dead + "-bbbbbbbbbbbbbbbb")});
}

TEST_CASE("prepare: a stop request interrupts the run and leaves nothing behind") {
  test::TempDir tmp;
  test::write_text(tmp / "in.jsonl", join_lines(make_lines(0, 3000)));
  PrepareOptions o = options_for(tmp / "in.jsonl", tmp / "out");
  std::atomic<bool> stop{false};
  o.stop_requested = &stop;

  SUBCASE("requested before the start") {
    stop = true;
    CHECK_THROWS_AS(prepare_chat_dataset(o), PrepareInterrupted);
  }
  SUBCASE("requested while lines are being written") {
    o.batch_bytes = 1024;  // many batches, so the run is well under way when asked to stop
    o.progress_interval_seconds = 0.0;
    std::uint64_t lines_at_stop = 0;
    o.on_progress = [&](const PrepareProgress& p) {
      if (p.lines >= 200 && !stop) {
        lines_at_stop = p.lines;
        stop = true;
      }
    };
    try {
      prepare_chat_dataset(o);
      FAIL("expected PrepareInterrupted");
    } catch (const PrepareInterrupted& e) {
      CHECK(e.kind() == ErrorKind::pipeline);
      CHECK(std::string(e.what()).find("interrupted") != std::string::npos);
    }
    CHECK(lines_at_stop >= 200);
    CHECK(lines_at_stop < 3000);
  }
  CHECK_FALSE(fs::exists(tmp / "out"));
  check_no_leftovers(tmp.path(), {"in.jsonl"});
  // The flag is only read: a later run without it completes.
  o.stop_requested = nullptr;
  o.on_progress = nullptr;
  CHECK(prepare_chat_dataset(o).conversations == 3000);
}

TEST_CASE("prepare: an empty train split is an error, an empty val split is not") {
  test::TempDir tmp;
  const std::vector<std::string> lines = make_lines(0, 4);
  test::write_text(tmp / "in.jsonl", join_lines(lines));
  PrepareOptions o = options_for(tmp / "in.jsonl", tmp / "out");

  SUBCASE("a val split of 1 is refused before any work") {
    o.val_split = 1.0;
    CHECK(test::error_of([&] { prepare_chat_dataset(o); }).find("[0, 1)") != std::string::npos);
  }
  SUBCASE("every conversation landing in val") {
    double highest = 0;
    for (const std::string& line : lines) {
      ParsedConversation c;
      REQUIRE_FALSE(parse_conversation_line(line, ConversationInput::text, c));
      highest = std::max(highest, split_point(c, o.seed));
    }
    o.val_split = std::nextafter(highest, 1.0);  // just above every conversation's point
    REQUIRE(o.val_split < 1.0);
    CHECK(test::error_of([&] { prepare_chat_dataset(o); }, ErrorKind::format)
              .find("in.jsonl: all 4 conversations landed in val") != std::string::npos);
    // Just below the highest point, that conversation is train's: the dataset is written.
    o.val_split = highest;
    const PrepareSummary s = prepare_chat_dataset(o);
    CHECK(s.train.episodes == 1);
    CHECK(s.val.episodes == 3);
  }
  SUBCASE("an input without any conversation") {
    test::write_text(tmp / "in.jsonl", "\n   \nnot json\n");
    o.on_error = OnBadLine::skip;
    CHECK_THROWS_WITH_AS(prepare_chat_dataset(o),
                         doctest::Contains("no conversation to write (3 lines: 1 skipped, 2 blank)"), Error);
    test::write_text(tmp / "in.jsonl", "");
    CHECK_THROWS_WITH_AS(prepare_chat_dataset(o), doctest::Contains("no conversation to write (0 lines"), Error);
  }
  if (!fs::exists(tmp / "out")) check_no_leftovers(tmp.path(), {"in.jsonl"});
}

TEST_CASE("prepare: misconfigurations of pre-tokenized input are errors, not silently ignored") {
  test::TempDir tmp;
  test::write_text(tmp / "in.jsonl",
                   R"({"messages": [{"role": "user", "ids": [10]}, {"role": "assistant", "ids": [11]}]})"
                   "\n");
  PrepareOptions o = options_for(tmp / "in.jsonl", tmp / "out");
  o.val_split = 0.0;
  o.special_tokens_file = tmp / "special.json";

  SUBCASE("a misspelt key in the special-tokens file names the file and the key") {
    test::write_text(tmp / "special.json",
                     R"({"system": 1, "user": 2, "assistant": 3, "tol": 4, "eot": 0, "vocab_size": 100})");
    CHECK(test::error_of([&] { prepare_chat_dataset(o); }).find("special.json: unknown key \"tol\"") !=
          std::string::npos);
  }
  SUBCASE("a system text does not apply to pre-tokenized input") {
    test::write_text(tmp / "special.json", R"({"system": 1, "user": 2, "assistant": 3, "eot": 0, "vocab_size": 100})");
    o.system_text = "Be brief.";
    CHECK_THROWS_WITH_AS(prepare_chat_dataset(o), doctest::Contains("default_system_ids"), Error);
    o.system_text.reset();
    CHECK(prepare_chat_dataset(o).conversations == 1);
  }
  CHECK_FALSE(fs::exists(tmp / "out" / "val"));
}

TEST_CASE("prepare: the records name files by canonical path and the tokenfeed version") {
  test::TempDir tmp;
  test::write_text(tmp / "in.jsonl",
                   R"({"messages": [{"role": "user", "ids": [10]}, {"role": "assistant", "ids": [11]}]})"
                   "\n");
  test::write_text(tmp / "conf" / "special.json",
                   R"({"system": 1, "user": 2, "assistant": 3, "eot": 0, "vocab_size": 100})");
  fs::create_directories(tmp / "elsewhere");
  PrepareOptions o = options_for(tmp / "in.jsonl", tmp / "out");
  o.val_split = 0.0;
  o.special_tokens_file = tmp / "elsewhere" / ".." / "conf" / "special.json";
  prepare_chat_dataset(o);
  const json state = read_json(tmp / "out" / "tokenizer_state.json");
  CHECK(state["special_tokens_file"]["path"] == fs::canonical(tmp / "conf" / "special.json").string());
  CHECK(fs::path(state["special_tokens_file"]["path"].get<std::string>()).is_absolute());
  const json meta = read_json(tmp / "out" / "dataset_metadata.json");
  CHECK(meta["tokenfeed_version"] == std::string(version()));
  CHECK(meta["created_by"] == "tokenfeed prepare");
}
