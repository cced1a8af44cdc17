// Reading audit logs back: every line AuditLog writes parses to the fields it was given;
// a last line cut short by a kill is reported as torn, never taken for an event; a forged or
// damaged complete line is an error naming its line number.
#include <sys/stat.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "audit/audit_log.hpp"
#include "tokenfeed/audit.hpp"
#include "test_support.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

constexpr const char* kLine = "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=epoch_start | split=train";

}  // namespace

TEST_CASE("audit reader: what AuditLog writes reads back field for field, hostile values included") {
  TempDir dir;
  const AuditLog::Fields fields = {{"split", "train"},
                                   {"forged", "x\n2026-01-01T00:00:00.000Z | TRAINING | INFO | action=forged"},
                                   {"path", std::string("a \"b\" \\c | d=e, \r\t\x01\x7f")},
                                   {"empty", ""},
                                   {"ids", format_id_list({3, 1, 2})}};
  std::filesystem::path path;
  {
    AuditLog log(dir / "logs", 0);
    log.write("dataset_load", {{"dataset_dir", "/data/x"}});
    log.write("epoch_start", fields);
    path = log.path();
  }
  const AuditLogContents contents = read_audit_log(path);
  CHECK_FALSE(contents.torn_line.has_value());
  REQUIRE(contents.events.size() == 2);
  CHECK(contents.events[0].action == "dataset_load");
  CHECK(contents.events[0].line == 1);
  CHECK(contents.events[0].level == "INFO");
  CHECK(contents.events[0].field("dataset_dir") == "/data/x");
  const AuditEvent& e = contents.events[1];
  CHECK(e.line == 2);
  CHECK(e.action == "epoch_start");
  CHECK(e.fields == fields);
  CHECK(e.field("ids") == "[3, 1, 2]");
  CHECK_FALSE(e.field("action").has_value());
  CHECK_FALSE(e.field("missing").has_value());
}

TEST_CASE("audit reader: a last line without its newline is torn, not an event") {
  TempDir dir;
  const auto path = dir / "audit.log";
  write_text(path, std::string(kLine) + "\n");
  // Cut anywhere, even where the text so far would parse as a whole event.
  const std::string next = std::string(kLine) + " | epoch=1";
  for (const std::size_t cut :
       {std::size_t{1}, std::size_t{24}, std::string(kLine).size(), next.size() - 2, next.size()}) {
    CAPTURE(cut);
    write_text(path, std::string(kLine) + "\n" + next.substr(0, cut));
    const AuditLogContents contents = read_audit_log(path);
    REQUIRE(contents.events.size() == 1);
    CHECK(contents.events[0].field("split") == "train");
    REQUIRE(contents.torn_line.has_value());
    CHECK(contents.torn_line->text == next.substr(0, cut));
    CHECK(contents.torn_line->bytes == cut);
    CHECK(contents.torn_line->line == 2);
  }
  write_text(path, "");
  const AuditLogContents empty = read_audit_log(path);
  CHECK(empty.events.empty());
  CHECK_FALSE(empty.torn_line.has_value());
}

TEST_CASE("audit reader: a forged or damaged line in the middle is an error naming its line") {
  TempDir dir;
  const auto path = dir / "audit.log";
  const std::string good = std::string(kLine) + "\n";
  const auto message = [&](const std::string& bad) {
    write_text(path, good + good + bad + "\n" + good);
    return error_of([&] { read_audit_log(path); }, ErrorKind::format);
  };
  const std::string what = message("forged");
  CHECK(what.find("line 3 is not an audit event") != std::string::npos);
  CHECK(what.find(path.string()) != std::string::npos);
  CHECK(what.find("'forged'") != std::string::npos);
  // Bad lines of every kind; each is one AuditLog could never have written.
  for (const std::string bad : {
           "",                                                                        // an empty line
           "2026-01-03 16:44:19.628Z | TRAINING | INFO | action=epoch_start",         // timestamp shape
           "2026-01-03T16:44:19.628Z | TRAINING | info | action=epoch_start",         // level case
           "2026-01-03T16:44:19.628Z | EVAL | INFO | action=epoch_start",             // category
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | split=train | action=x",     // action not first
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | action=y",        // action twice
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | split=a b",       // space unquoted
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | split=",          // empty unquoted
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | split=\"a",       // unterminated
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | split=\"a\\q\"",  // unknown escape
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | split=\"\\x4\"",  // short hex
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | split=\"a\tb\"",  // raw control
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | split=\"a\"b",    // after the quote
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | =v",              // no key
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | ",                // trailing separator
           "2026-01-03T16:44:19.628Z | TRAINING | INFO | action=x | split=train\r",   // CR line end
       }) {
    CAPTURE(bad);
    CHECK_FALSE(parse_audit_line(bad).has_value());
    CHECK(message(bad).find("line 3 is not an audit event") != std::string::npos);
  }
  // A good line still parses, with its line number; quoted escapes decode.
  const auto ok = parse_audit_line(std::string(kLine) + " | p=\"\\x41\\\"\\\\\\n\"", 7);
  REQUIRE(ok.has_value());
  CHECK(ok->line == 7);
  CHECK(ok->field("p") == "A\"\\\n");
}

TEST_CASE("audit reader: a FIFO or a missing file is an io error, without blocking" * doctest::timeout(30)) {
  TempDir dir;
  CHECK(error_of([&] { read_audit_log(dir / "missing.log"); }, ErrorKind::io).find("missing.log") != std::string::npos);
  REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
  CHECK(error_of([&] { read_audit_log(dir / "fifo"); }, ErrorKind::io).find("FIFO") != std::string::npos);
}

TEST_CASE("audit reader: a complete line past the limit is an error, a torn one of any length is reported") {
  TempDir dir;
  const std::string overlong(kMaxAuditLineBytes + 3, 'x');
  write_text(dir / "long.log", std::string(kLine) + "\n" + overlong + "\n");
  const std::string what = error_of([&] { read_audit_log(dir / "long.log"); }, ErrorKind::format);
  CHECK(what.find("line 2 is " + std::to_string(overlong.size()) + " bytes long, more than") != std::string::npos);

  write_text(dir / "torn.log", std::string(kLine) + "\n" + overlong);
  const AuditLogContents contents = read_audit_log(dir / "torn.log");
  REQUIRE(contents.events.size() == 1);
  REQUIRE(contents.torn_line.has_value());
  CHECK(contents.torn_line->line == 2);
  CHECK(contents.torn_line->bytes == overlong.size());
  CHECK(contents.torn_line->text == overlong.substr(0, kMaxAuditLineBytes));
}

TEST_CASE("audit reader: AuditLogReader hands out the events one at a time, lines across its buffer") {
  TempDir dir;
  // Lines of growing length, so that some straddle the reader's 64 KiB reads.
  std::string text;
  std::vector<std::string> notes;
  for (std::size_t i = 0; i < 40; ++i) {
    notes.push_back(std::string(i * 4000 + 1, static_cast<char>('a' + i % 26)));
    text += std::string(kLine) + " | note=" + notes.back() + "\n";
  }
  write_text(dir / "audit.log", text + "2026-01");
  AuditLogReader reader(dir / "audit.log");
  for (std::size_t i = 0; i < notes.size(); ++i) {
    CAPTURE(i);
    const std::optional<AuditEvent> event = reader.next();
    REQUIRE(event.has_value());
    CHECK(event->line == i + 1);
    CHECK(event->field("note") == notes[i]);
    CHECK_FALSE(reader.torn_line().has_value());
  }
  CHECK_FALSE(reader.next().has_value());
  REQUIRE(reader.torn_line().has_value());
  CHECK(reader.torn_line()->text == "2026-01");
  CHECK(reader.torn_line()->line == notes.size() + 1);
  CHECK_FALSE(reader.next().has_value());  // and stays at the end
}

TEST_CASE("audit reader: a loader's log reads back, epoch events in order") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(8, {4}));
  Config c = make_config(dir.path(), 2, 4);
  c.audit_log_dir = dir / "audit";
  {
    Loader loader(c);
    for (int i = 0; i < 5; ++i) loader.get_batch();
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir / "audit")) files.push_back(e.path());
  REQUIRE(files.size() == 1);
  const AuditLogContents contents = read_audit_log(files[0]);
  CHECK_FALSE(contents.torn_line.has_value());
  std::vector<std::string> actions;
  for (const AuditEvent& e : contents.events) actions.push_back(e.action);
  CHECK(actions == std::vector<std::string>{"dataset_load", "epoch_start", "epoch_complete", "epoch_start"});
  CHECK(contents.events[0].field("dataset_dir") == dir.path().string());
  CHECK(contents.events[3].field("epoch") == "1");
}
