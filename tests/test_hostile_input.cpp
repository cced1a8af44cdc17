// Hostile input: values built to crash, hang, overflow or exhaust memory end in a clear
// tokenfeed::Error (or a line defect), never a crash.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <limits>

#include <sys/stat.h>

#include "audit/audit_log.hpp"
#include "pipeline/batch_pool.hpp"
#include "chat/conversation_jsonl.hpp"
#include "dataset/dataset_metadata.hpp"
#include "splits/resume_state.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/tokenizer.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// A JSON array nested `depth` deep: far past any stack when echoed by a recursive dump().
std::string nested_array(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

constexpr std::size_t kDeep = 200000;

}  // namespace

TEST_CASE("hostile: deeply nested JSON in a resume state is refused without echoing it") {
  const std::string state =
      R"({"format":"tokenfeed-state","version":)" + nested_array(kDeep) + R"(,"fingerprint":"x","splits":{}})";
  const std::string message = error_of([&] { parse_resume_state(state); }, ErrorKind::state);
  CHECK(message.find("nesting deeper than 64") != std::string::npos);
  CHECK(message.size() < 400);
  // A value within the depth limit is quoted by kind and size, not dumped.
  std::string wide = R"({"format":"tokenfeed-state","version":[)";
  for (int i = 0; i < 50000; ++i) wide += "1,";
  wide += "1]}";
  const std::string quoted = error_of([&] { parse_resume_state(wide); }, ErrorKind::state);
  INFO(quoted);
  CHECK(quoted.find("an array of 50001 elements") != std::string::npos);
  CHECK(quoted.size() < 400);
  const std::string long_string = R"({"format":"tokenfeed-state","version":")" + std::string(100000, 'v') + "\"}";
  CHECK(error_of([&] { parse_resume_state(long_string); }, ErrorKind::state).size() < 400);
}

TEST_CASE("hostile: deeply nested JSON reaching the Loader's load_state is an Error") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(8, {5}));
  Loader loader(make_config(dir.path(), 2, 8));
  const std::string state = R"({"format":"tokenfeed-state","version":1,"fingerprint":)" + nested_array(kDeep) + "}";
  CHECK(error_of([&] { loader.load_state(state); }, ErrorKind::state).find("nesting") != std::string::npos);
}

TEST_CASE("hostile: deeply nested dataset_metadata.json is an Error(format)") {
  TempDir dir;
  write_text(dir / "dataset_metadata.json", R"({"token_dtype":)" + nested_array(kDeep) + "}");
  const std::string message = error_of([&] { read_dataset_metadata(dir.path()); }, ErrorKind::format);
  CHECK(message.find("nesting deeper than 64") != std::string::npos);
  CHECK(message.size() < 400 + (dir / "dataset_metadata.json").string().size());
  write_text(dir / "dataset_metadata.json", R"({"eot_token_id":")" + std::string(100000, 'e') + "\"}");
  CHECK(error_of([&] { read_dataset_metadata(dir.path()); }, ErrorKind::format).size() < 600);
}

TEST_CASE("hostile: a deeply nested JSONL line is a line defect, also under an unread key") {
  ParsedConversation out;
  for (const std::string& line :
       {R"({"meta":)" + nested_array(kDeep) + R"(,"messages":[{"role":"user","content":"hi"}]})",
        R"({"messages":[{"role":"user","content":)" + nested_array(kDeep) + "}]}"}) {
    const auto defect = parse_conversation_line(line, ConversationInput::text, out);
    REQUIRE(defect);
    CHECK(defect->reason == kReasonInvalidJson);
    CHECK(defect->detail.find("nesting deeper than 64") != std::string::npos);
  }
  // Ids that are not integers are quoted briefly.
  const std::string line = R"({"messages":[{"role":"user","ids":[")" + std::string(100000, 'i') + R"("]}]})";
  const auto defect = parse_conversation_line(line, ConversationInput::token_ids, out);
  REQUIRE(defect);
  CHECK(defect->detail.size() < 400);
}

TEST_CASE("hostile: a deeply nested --special-tokens file is an Error(config)") {
  TempDir dir;
  write_text(dir / "special.json", R"({"system":)" + nested_array(kDeep) + "}");
  CHECK(error_of([&] { read_pretokenized_specials(dir / "special.json"); }).find("nesting") != std::string::npos);
  write_text(dir / "special.json", R"({"system":")" + std::string(100000, 's') + "\"}");
  CHECK(error_of([&] { read_pretokenized_specials(dir / "special.json"); }).size() < 600);
}

// Sanitizer runtimes reserve terabytes of address space and count it as data, so a data
// limit cannot be set under them.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST_CASE("hostile: a huge unread field of a JSONL line costs no parse memory" * doctest::timeout(120)) {
  // 30 MB of empty arrays under a key prepare never reads: stored, they would take about
  // 10 million DOM values (~500 MB); the child runs under a 200 MB data limit above what it
  // holds before parsing.
  std::string line = R"({"pad":[)";
  for (int i = 0; i < 10'000'000; ++i) line += "[],";
  line += R"([]],"messages":[{"role":"user","content":"hi","extra":[)";
  for (int i = 0; i < 100'000; ++i) line += "[],";
  line += "[]]}]}";
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::ifstream status("/proc/self/status");
    std::string key;
    std::size_t data_kb = 0;
    while (status >> key) {
      if (key == "VmData:") {
        status >> data_kb;
        break;
      }
    }
    const rlim_t limit = (data_kb + 200 * 1024) * 1024;
    const rlimit rl{limit, limit};
    if (setrlimit(RLIMIT_DATA, &rl) != 0) _exit(3);
    try {
      ParsedConversation out;
      const auto defect = parse_conversation_line(line, ConversationInput::text, out);
      _exit(!defect && out.text.size() == 1 && out.text[0].content == "hi" ? 0 : 1);
    } catch (...) {
      _exit(2);
    }
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
#endif

TEST_CASE("hostile: resume states no run can reach are refused before they overflow") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(12, {5, 9}), TokenDtype::uint32);
  Config base = make_config(dir.path(), 2, 8);
  base.token_dtype = TokenDtype::uint32;
  const auto state_with = [](const std::string& fingerprint, std::uint64_t step, std::uint64_t epoch,
                             std::uint64_t batch) {
    ResumeState s;
    s.fingerprint = fingerprint;
    s.splits["train"] = {step, epoch, batch};
    return serialize_resume_state(s);
  };
  constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();
  SUBCASE("sft_episode, epoch sampling") {
    Loader loader(base);
    const std::string fp = loader.fingerprint();
    CHECK(error_of([&] { loader.load_state(state_with(fp, kMax, 0, 0)); }, ErrorKind::state).find("step=") !=
          std::string::npos);
    // Within the step bound but past numpy's seed range: refused at load, not mid-run.
    CHECK(
        error_of([&] { loader.load_state(state_with(fp, (1ULL << 40), 0, 0)); }, ErrorKind::state).find("seed range") !=
        std::string::npos);
    // Fields the step decides must agree with it (12 episodes, 6 batches an epoch: step 7 is
    // epoch 1, batch 1), else the state was not written by a Loader.
    for (const auto& [epoch, batch] :
         {std::pair{kMax, std::uint64_t{1'000'000'000}}, std::pair{std::uint64_t{0}, std::uint64_t{0}},
          std::pair{std::uint64_t{1}, std::uint64_t{2}}}) {
      CHECK(error_of([&] { loader.load_state(state_with(fp, 7, epoch, batch)); }, ErrorKind::state)
                .find("but its step=7 is epoch 1, batch_in_epoch 1, row_in_epoch 0") != std::string::npos);
    }
    loader.load_state(state_with(fp, 7, 1, 1));
    CHECK(loader.get_batch().step() == 7);
    // A state without the train split is refused, not resumed at step 0.
    ResumeState no_train;
    no_train.fingerprint = fp;
    no_train.splits["val"] = {0, 0, 0};
    CHECK(error_of([&] { loader.load_state(serialize_resume_state(no_train)); }, ErrorKind::state)
              .find("no splits.train entry") != std::string::npos);
  }
  SUBCASE("sft_episode, random sampling: epoch 0, batch_in_epoch = step") {
    Config c = base;
    c.batch_sampling_mode = SamplingMode::random;
    Loader loader(c);
    const std::string fp = loader.fingerprint();
    CHECK(error_of([&] { loader.load_state(state_with(fp, 5, 3, 5)); }, ErrorKind::state)
              .find("but its step=5 is epoch 0, batch_in_epoch 5") != std::string::npos);
    loader.load_state(state_with(fp, 5, 0, 5));
    CHECK(loader.get_batch().step() == 5);
  }
  SUBCASE("sft_packed: the epoch comes from the state") {
    Config c = base;
    c.block_size = 16;
    c.dataset_mode = DatasetMode::sft_packed;
    c.epoch_shuffle = false;  // no seed range to stop a huge epoch
    Loader loader(c);
    const std::string fp = loader.fingerprint();
    CHECK(error_of([&] { loader.load_state(state_with(fp, 3, (1ULL << 63) - 1, 0)); }, ErrorKind::state)
              .find("cannot be reached") != std::string::npos);
    CHECK(error_of([&] { loader.load_state(state_with(fp, 3, 0, kMax)); }, ErrorKind::state).find("batch_in_epoch") !=
          std::string::npos);
    CHECK(error_of([&] { loader.load_state(state_with(fp, kMax, 0, 0)); }, ErrorKind::state).find("step=") !=
          std::string::npos);
  }
}

TEST_CASE("hostile: inherits accepts only a regular file of bounded size" * doctest::timeout(60)) {
  TempDir dir;
  const auto load = [&](const std::string& target) {
    write_text(dir / "child.xml", "<training inherits=\"" + target + "\"><batch_size>2</batch_size></training>");
    return error_of([&] { load_config_file(dir / "child.xml"); }, ErrorKind::io);
  };
  CHECK(load("/dev/zero").find("character device") != std::string::npos);
  REQUIRE(::mkfifo((dir / "fifo.xml").c_str(), 0600) == 0);
  CHECK(load("fifo.xml").find("FIFO") != std::string::npos);
  write_text(dir / "huge.xml", "<training>" + std::string(2 << 20, ' ') + "</training>");
  CHECK(load("huge.xml").find("larger than") != std::string::npos);
  // A long chain is refused before it exhausts the stack.
  for (int i = 0; i < 40; ++i) {
    write_text(dir / ("c" + std::to_string(i) + ".xml"),
               i == 39 ? std::string("<training/>") : "<training inherits=\"c" + std::to_string(i + 1) + ".xml\"/>");
  }
  CHECK(error_of([&] { load_config_file(dir / "c0.xml"); }).find("deeper than 32") != std::string::npos);
}

TEST_CASE("hostile: FIFOs in a dataset are refused, never waited on" * doctest::timeout(60)) {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(8, {5}));
  const Config c = make_config(dir.path(), 2, 8);
  SUBCASE("episodes.idx") {
    std::filesystem::remove(dir / "train" / "episodes.idx");
    REQUIRE(::mkfifo((dir / "train" / "episodes.idx").c_str(), 0600) == 0);
    CHECK(error_of([&] { Loader loader(c); }, ErrorKind::io).find("not a regular file") != std::string::npos);
  }
  SUBCASE("tokens.bin") {
    std::filesystem::remove(dir / "train" / "tokens.bin");
    REQUIRE(::mkfifo((dir / "train" / "tokens.bin").c_str(), 0600) == 0);
    CHECK_THROWS_AS(Loader{c}, Error);
  }
  SUBCASE("dataset_metadata.json") {
    REQUIRE(::mkfifo((dir / "dataset_metadata.json").c_str(), 0600) == 0);
    CHECK(error_of([&] { Loader loader(c); }, ErrorKind::io).find("FIFO") != std::string::npos);
  }
}

TEST_CASE("hostile: control characters in audit fields cannot forge an event line") {
  TempDir dir;
  std::filesystem::path log;
  {
    AuditLog audit(dir / "logs", 0);
    audit.write("epoch_start", {{"split", "train\n2026-01-01T00:00:00.000Z | TRAINING | INFO | action=forged"},
                                {"path", std::string("a\rb\x01"
                                                     "c\\d")},
                                {"key\nforged", "v"}});
    log = audit.path();
  }
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0].find(R"(split="train\n2026-01-01T00:00:00.000Z | TRAINING | INFO | action=forged")") !=
        std::string::npos);
  CHECK(lines[0].find(R"(path="a\rb\x01c\\d")") != std::string::npos);
  CHECK(lines[0].find(R"(key\nforged=v)") != std::string::npos);

  // End to end: a newline in audit_log_dir (e.g. &#10; in the XML) stays inside its field.
  write_split(dir.path(), "train", numbered_episodes(8, {5}));
  Config c = make_config(dir.path(), 2, 8);
  c.audit_log_dir = dir / "audit\n2026-01-01T00:00:00.000Z | TRAINING | INFO | action=forged";
  {
    Loader loader(c);
    loader.get_batch();
  }
  std::size_t events = 0;
  for (const auto& entry : std::filesystem::directory_iterator(c.audit_log_dir)) {
    std::ifstream file(entry.path());
    for (std::string line; std::getline(file, line); ++events) {
      CHECK(line.find(" | TRAINING | INFO | action=") == 24);
      CHECK(line.find("action=forged |") == std::string::npos);
    }
  }
  CHECK(events >= 2);
}

TEST_CASE("hostile: a config whose batch buffers exceed max_memory_mb is refused before allocating") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(64, {5}));
  // A fixed depth of 4096 batches of 64 x 4096: about 38 GB of buffers.
  Config deep = make_config(dir.path(), 64, 4096);
  deep.prefetch_depth = 4096;
  deep.max_memory_mb = 1024;
  const std::string message = error_of([&] { Loader loader(deep); });
  INFO(message);
  CHECK(message.find("max_memory_mb=1024") != std::string::npos);
  CHECK(message.find("4100 batches of") != std::string::npos);
  // One batch of 31 x 2^26 positions (about 75 GB) under the default, half the physical memory.
  Config wide = make_config(dir.path(), 31, std::int64_t{1} << 26);
  const std::string wide_message = error_of([&] { Loader loader(wide); });
  INFO(wide_message);
  CHECK(wide_message.find("auto: half of the physical memory") != std::string::npos);
  // Absurd products are refused by validation, before any arithmetic can overflow.
  Config absurd = make_config(dir.path(), std::int64_t{1} << 40, std::int64_t{1} << 40);
  CHECK(error_of([&] { validate_config(absurd); }).find("2^34 positions") != std::string::npos);
  // Within the limit the loader works, and the key round-trips through XML.
  Config fits = make_config(dir.path(), 2, 8);
  fits.max_memory_mb = 64;
  Loader loader(fits);
  CHECK(loader.get_batch().step() == 0);
  set_config_value(fits, "max_memory_mb", "auto");
  CHECK(fits.max_memory_mb == 0);
  CHECK(effective_max_memory_mb(fits) > 0);
  fits.max_memory_mb = -1;
  CHECK(error_of([&] { validate_config(fits); }).find("max_memory_mb") != std::string::npos);
}

TEST_CASE("hostile: bytes_per_slot is what a slot allocates, for every shape") {
  for (const bool contract : {false, true}) {
    for (const bool packed : {false, true}) {
      for (const bool doc : {false, true}) {
        detail::BatchShape shape;
        shape.rows = 3;
        shape.cols = 7;
        shape.with_mask = true;
        shape.contract_fields = contract || packed;
        shape.packed = packed;
        shape.y_is_labels = packed || doc;
        shape.mask_is_weights = packed;
        shape.with_document_fields = doc;
        auto pool = std::make_shared<detail::BatchPool>(1, shape, "train");
        detail::BatchSlot* slot = pool->acquire();
        REQUIRE(slot != nullptr);
        CHECK(slot->buffer_bytes() == detail::BatchPool::bytes_per_slot(shape));
        pool->release(slot);
      }
    }
  }
  detail::BatchShape huge;
  huge.rows = std::size_t{1} << 40;
  huge.cols = std::size_t{1} << 40;
  CHECK(detail::BatchPool::bytes_per_slot(huge) == UINT64_MAX);
}

TEST_CASE("hostile: a SentencePiece model whose trie builder throws is an Error, not a library exception") {
  // ModelProto { pieces { piece: "<unk>" type: UNKNOWN } pieces { piece: "\0" type: NORMAL } }:
  // SentencePiece passes pieces to its trie builder as C strings, and "\0" is a zero-length key.
  const auto piece = [](const std::string& text, char type) {
    std::string body =
        std::string("\x0a") + static_cast<char>(text.size()) + text + std::string("\x15\0\0\0\0", 5) + "\x18" + type;
    return std::string("\x0a") + static_cast<char>(body.size()) + body;
  };
  TempDir dir;
  write_text(dir / "empty_piece.model", piece("<unk>", 2) + piece(std::string(1, '\0'), 1));
  const std::string spec = "sentencepiece:" + (dir / "empty_piece.model").string();
  try {
    (void)make_tokenizer(spec);
    FAIL("expected an Error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::format);
    CHECK(std::string(e.what()).find("empty_piece.model") != std::string::npos);
    CHECK(std::string(e.what()).find("zero-length key") != std::string::npos);
  }
}
