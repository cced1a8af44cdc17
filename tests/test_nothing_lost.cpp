// Nothing silently lost or changed: the metadata's pad id is used, a too-small token-stream
// val split fails only when used, and packed epochs train every kept episode.
#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <mutex>
#include <random>

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

void write_tokens(const std::filesystem::path& path, std::size_t n) {
  std::vector<std::uint16_t> tokens(n);
  for (std::size_t i = 0; i < n; ++i) tokens[i] = static_cast<std::uint16_t>(i + 1);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(tokens.data()), static_cast<std::streamsize>(n * 2));
}

}  // namespace

TEST_CASE("pad_token_id: config, then the metadata's pad_token_id, then eot/eos, the open line says which") {
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
  const auto open_line = [&](const Config& config) { return logged_lines([&] { Loader loader(config); }); };

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

TEST_CASE("token stream: a val.bin shorter than one window fails only when val is used") {
  TempDir dir;
  write_tokens(dir / "train.bin", 200);
  write_tokens(dir / "val.bin", 5);  // block 8: a window needs 9 tokens
  for (const SamplingMode mode : {SamplingMode::random, SamplingMode::epoch}) {
    CAPTURE(to_string(mode));
    Config c = make_config(dir.path(), 2, 8);
    c.token_dtype = TokenDtype::uint16;
    c.batch_sampling_mode = mode;
    std::unique_ptr<Loader> loader;
    const auto lines = logged_lines([&] { loader = std::make_unique<Loader>(c); });
    CHECK(has_line(lines, "get_batch(\"val\") will fail"));
    CHECK(loader->get_batch("train").rows() == 2);
    // The error train that small gets at open.
    CHECK(error_of([&] { loader->get_batch("val"); }, ErrorKind::format).find("split 'val'") != std::string::npos);
    // A state from this loader resumes.
    Loader again(c);
    again.load_state(loader->save_state());
    CHECK(again.get_batch("train").step() == 1);
  }
  // train that small is still an error at open.
  write_tokens(dir / "train.bin", 5);
  Config c = make_config(dir.path(), 2, 8);
  c.token_dtype = TokenDtype::uint16;
  CHECK(error_of([&] { Loader loader(c); }, ErrorKind::format).find("split 'train'") != std::string::npos);
}

TEST_CASE("sft_packed with epoch_drop_last=true trains every kept episode once per epoch" * doctest::timeout(120)) {
  // 400 episodes of 2..130 tokens at block_size 128: the longest-first gap filling leaves
  // mostly short episodes in an epoch's last rows, which a dropped remainder would lose.
  TempDir dir;
  std::mt19937 rng(11);
  std::vector<TestEpisode> episodes(400);
  for (std::size_t id = 0; id < episodes.size(); ++id) {
    const std::size_t n = 2 + rng() % 129;
    for (std::size_t p = 0; p < n; ++p) {
      episodes[id].tokens.push_back(static_cast<std::uint32_t>(1000 * id + p + 1));
      episodes[id].mask.push_back(1);
    }
  }
  write_split(dir.path(), "train", episodes, TokenDtype::uint32, true);
  Config c = make_config(dir.path(), 5, 128);
  c.dataset_mode = DatasetMode::sft_packed;
  c.token_dtype = TokenDtype::uint32;
  c.epoch_drop_last = true;
  Loader loader(c);
  const std::uint64_t E = 3;
  std::map<std::int64_t, std::uint64_t> trained;
  std::uint64_t batches = 0;
  std::uint64_t expected_in_epoch = 0;  // batch_in_epoch counts batches from 0 in each epoch
  std::uint64_t current_epoch = 0;
  while (true) {
    Batch b = loader.get_batch();
    if (b.epoch() == E) break;
    if (b.epoch() != current_epoch) {
      current_epoch = b.epoch();
      expected_in_epoch = 0;
    }
    CHECK(b.batch_in_epoch() == expected_in_epoch++);
    CHECK(b.real_rows() == 5);  // every row holds episodes: nothing dropped, nothing filled
    for (const PackedSegment& s : b.segments()) ++trained[s.episode];
    ++batches;
  }
  CHECK(batches > 0);
  // Every batch before epoch E's first holds epochs 0..E-1 entirely, and maybe the first
  // rows of epoch E (carried into the last of them).
  CHECK(trained.size() == episodes.size());
  std::uint64_t extra = 0;
  for (const auto& [id, count] : trained) {
    CAPTURE(id);
    CHECK(count >= E);
    CHECK(count <= E + 1);
    extra += count - E;
  }
  CHECK(extra < 5 * 128);  // at most the carried rows of one batch
}
