// Nothing silently lost or changed: the metadata's pad id is used.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <mutex>

#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// The info lines logged while `f` runs.
template <typename F>
std::vector<std::string> logged_lines(F&& f) {
  std::mutex mutex;
  std::vector<std::string> lines;
  const LogHandler previous = set_log_handler([&](LogLevel, std::string_view line) {
    std::lock_guard lock(mutex);
    lines.emplace_back(line);
  });
  try {
    f();
  } catch (...) {
    set_log_handler(previous);
    throw;
  }
  set_log_handler(previous);
  return lines;
}

bool has_line(const std::vector<std::string>& lines, const std::string& text) {
  for (const auto& line : lines) {
    if (line.find(text) != std::string::npos) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("pad_token_id: config, then the metadata's pad_token_id, then eot/eos; the open line says which") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(4, {3}));  // every row has padding at block 6
  Config c = make_config(dir.path(), 2, 6);
  c.pad_token_id.reset();
  c.epoch_shuffle = false;
  const auto pad_of = [&](const Config& config) {
    Loader loader(config);
    Batch b = loader.get_batch();
    return b.x()[5];  // past the 3 tokens of episode 0
  };
  const auto open_line = [&](const Config& config) {
    return logged_lines([&] { Loader loader(config); });
  };

  write_text(dir / "dataset_metadata.json", R"({"pad_token_id": 9, "eot_token_id": 7, "eos_token_id": 8})");
  CHECK(pad_of(c) == 9);
  CHECK(has_line(open_line(c), "pad_id=9 (metadata pad_token_id)"));
  Config given = c;
  given.pad_token_id = 3;
  CHECK(pad_of(given) == 3);
  CHECK(has_line(open_line(given), "pad_id=3 (config)"));

  write_text(dir / "dataset_metadata.json", R"({"eot_token_id": 7, "eos_token_id": 8})");
  CHECK(pad_of(c) == 7);
  CHECK(has_line(open_line(c), "pad_id=7 (metadata eot_token_id)"));
  write_text(dir / "dataset_metadata.json", R"({"eos_token_id": 8})");
  CHECK(pad_of(c) == 8);
  CHECK(has_line(open_line(c), "pad_id=8 (metadata eos_token_id)"));
  write_text(dir / "dataset_metadata.json", R"({"vocab_size": 100})");
  CHECK(error_of([&] { Loader loader(c); }).find("gives none of pad_token_id, eot_token_id, eos_token_id") !=
        std::string::npos);
  write_text(dir / "dataset_metadata.json", R"({"pad_token_id": -1})");
  CHECK(error_of([&] { Loader loader(c); }, ErrorKind::format).find("'pad_token_id'") != std::string::npos);
}
