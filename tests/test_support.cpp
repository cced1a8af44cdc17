#include "test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <sstream>
#include <string>
#include <fstream>
#include <iterator>
#include <random>
#include <sys/mman.h>
#include <unistd.h>

#include "tokenfeed/dataset_writer.hpp"

namespace tokenfeed::test {

namespace fs = std::filesystem;

fs::path find_spm_train() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const fs::path candidate = fs::path(dir) / "spm_train";
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec)) return candidate;
  }
  return {};
}

fs::path train_sentencepiece(const fs::path& spm_train, const fs::path& dir, const std::string& user_symbols,
                             const std::string& control_symbols) {
  const fs::path corpus = fs::path(TOKENFEED_TEST_DATA_DIR) / "spm_corpus.txt";
  REQUIRE(fs::exists(corpus));
  const fs::path prefix = dir / "model";
  std::string cmd = "'" + spm_train.string() + "' --input='" + corpus.string() + "' --model_prefix='" +
                    prefix.string() +
                    "' --vocab_size=400 --model_type=bpe --character_coverage=1.0 --byte_fallback=true"
                    " --normalization_rule_name=identity --add_dummy_prefix=false --remove_extra_whitespaces=false"
                    " --hard_vocab_limit=false --num_threads=1 --minloglevel=2";
  if (!user_symbols.empty()) cmd += " --user_defined_symbols='" + user_symbols + "'";
  if (!control_symbols.empty()) cmd += " --control_symbols='" + control_symbols + "'";
  cmd += " > '" + (dir / "spm_train.log").string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  INFO("spm_train command: " << cmd);
  REQUIRE(rc == 0);
  REQUIRE(fs::exists(prefix.string() + ".model"));
  return prefix.string() + ".model";
}

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  path_ = std::filesystem::temp_directory_path() /
          ("tokenfeed_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter.fetch_add(1)));
  std::filesystem::remove_all(path_);
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_split(const std::filesystem::path& dataset_dir, const std::string& split,
                 const std::vector<TestEpisode>& episodes, TokenDtype dtype, bool with_mask, std::size_t shards) {
  const std::size_t per_shard = (episodes.size() + shards - 1) / std::max<std::size_t>(shards, 1);
  std::size_t next = 0;
  for (std::size_t s = 0; s < shards; ++s) {
    const std::filesystem::path dir = dataset_dir / split;
    // No content checksums: the helper writes through a temporary split name, and tests
    // that want a dataset_metadata.json write their own.
    EpisodeDatasetWriterOptions options{dtype, with_mask, 0, false, false};
    // One writer per shard, each writing into its own shard_NNNNN directory.
    const std::filesystem::path tmp = dataset_dir / (".tmp_" + split + "_" + std::to_string(s));
    {
      EpisodeDatasetWriter writer(tmp, options);
      for (std::size_t i = 0; i < per_shard && next < episodes.size(); ++i, ++next) {
        const TestEpisode& e = episodes[next];
        std::vector<std::uint8_t> mask = e.mask;
        if (mask.empty()) mask.assign(e.tokens.size(), 1);
        writer.add(e.tokens, mask);
      }
      writer.finish();
    }
    std::filesystem::create_directories(dir);
    if (shards == 1) {
      // The flat layout: the three files directly in the split directory.
      for (const auto& file : std::filesystem::directory_iterator(tmp / "shard_00000")) {
        std::filesystem::rename(file.path(), dir / file.path().filename());
      }
    } else {
      char name[32];
      std::snprintf(name, sizeof name, "shard_%05zu", s);
      std::filesystem::rename(tmp / "shard_00000", dir / name);
    }
    std::filesystem::remove_all(tmp);
  }
}

std::vector<TestEpisode> numbered_episodes(std::size_t count, const std::vector<std::size_t>& lengths) {
  std::vector<TestEpisode> episodes(count);
  for (std::size_t id = 0; id < count; ++id) {
    const std::size_t n = lengths[id % lengths.size()];
    for (std::size_t p = 0; p < n; ++p) {
      episodes[id].tokens.push_back(static_cast<std::uint32_t>(1000 * id + p + 1));
      episodes[id].mask.push_back(static_cast<std::uint8_t>(p % 2));
    }
  }
  return episodes;
}

std::vector<TestEpisode> random_episodes(std::size_t count, std::size_t max_len, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<TestEpisode> episodes(count);
  for (std::size_t id = 0; id < count; ++id) {
    const std::size_t n = 2 + rng() % (max_len - 1);
    for (std::size_t p = 0; p < n; ++p) {
      episodes[id].tokens.push_back(static_cast<std::uint32_t>(1000 * id + p + 1));
      episodes[id].mask.push_back(static_cast<std::uint8_t>(rng() % 3 != 0));
    }
  }
  return episodes;
}

void write_raw(const std::filesystem::path& path, const void* data, std::size_t bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

Config make_config(const std::filesystem::path& dataset_dir, std::int64_t batch_size, std::int64_t block_size) {
  Config c;
  c.dataset_dir = dataset_dir;
  c.batch_size = batch_size;
  c.block_size = block_size;
  c.pad_token_id = 0;
  c.audit_log_dir.clear();
  c.decode_threads = 2;
  c.prefetch_depth = 4;
  return c;
}

ScopedEnv::ScopedEnv(std::vector<std::string> cleared, const std::vector<std::pair<std::string, std::string>>& set)
    : names_(std::move(cleared)) {
  for (const auto& [name, value] : set) names_.push_back(name);
  for (const std::string& name : names_) {
    if (const char* v = std::getenv(name.c_str())) saved_.emplace_back(name, v);
    unsetenv(name.c_str());
  }
  for (const auto& [name, value] : set) setenv(name.c_str(), value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
  for (const std::string& name : names_) unsetenv(name.c_str());
  for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
}

std::vector<char> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::size_t resident_pages(const void* data, std::size_t bytes) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto base = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t begin = (base + page - 1) / page * page;
  const std::uintptr_t end = (base + bytes) / page * page;
  if (end <= begin) return 0;
  std::vector<unsigned char> in_core((end - begin) / page);
  REQUIRE(mincore(reinterpret_cast<void*>(begin), end - begin, in_core.data()) == 0);
  return static_cast<std::size_t>(std::count_if(in_core.begin(), in_core.end(), [](unsigned char c) { return c & 1; }));
}

}  // namespace tokenfeed::test
