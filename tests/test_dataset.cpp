// Opening and validating episode-indexed splits: layouts, dtypes, and every validation
// error naming the file and record.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>

#include "dataset/episode_dataset.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

void write_index(const std::filesystem::path& path, const std::vector<std::uint64_t>& pairs) {
  write_raw(path, pairs.data(), pairs.size() * 8);
}

std::string open_error(const std::filesystem::path& dir, EpisodeSplitOptions options = {}) {
  try {
    EpisodeSplit::open(dir, options);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected an Error");
  return {};
}

}  // namespace

TEST_CASE("dataset: flat and sharded layouts, global ids across shards in sorted order") {
  TempDir dir;
  const auto episodes = numbered_episodes(10, {3, 5, 8});
  write_split(dir.path(), "train", episodes, TokenDtype::uint16, true, 3);
  EpisodeSplitOptions options;
  options.want_mask = true;
  const EpisodeSplit split = EpisodeSplit::open(dir / "train", options);
  CHECK(split.shards().size() == 3);
  CHECK(split.num_episodes() == 10);
  CHECK(split.token_dtype() == TokenDtype::uint16);  // inferred: uint32 does not fit the index
  CHECK(split.has_mask());
  for (std::uint64_t id = 0; id < 10; ++id) {
    std::vector<std::int64_t> tokens(episodes[id].tokens.size());
    split.read_tokens(id, 0, tokens.size(), tokens.data());
    CHECK(tokens == std::vector<std::int64_t>(episodes[id].tokens.begin(), episodes[id].tokens.end()));
    std::vector<float> mask(tokens.size());
    split.read_mask(id, 0, mask.size(), mask.data());
    for (std::size_t p = 0; p < mask.size(); ++p) CHECK(mask[p] == static_cast<float>(p % 2));
  }
  CHECK(split.shard_of(0) == 0);
  CHECK(split.shard_of(3) == 0);
  CHECK(split.shard_of(4) == 1);
  CHECK(split.shard_of(9) == 2);

  // The flat layout: files directly in the split directory.
  const std::uint16_t tokens[] = {1, 2, 3, 4, 5, 6};
  write_raw(dir / "flat/tokens.bin", tokens, sizeof tokens);
  write_index(dir / "flat/episodes.idx", {4, 2, 0, 4, 1, 0});  // out of order, overlapping, empty
  const EpisodeSplit flat = EpisodeSplit::open(dir / "flat", {TokenDtype::uint16, {}, false});
  CHECK(flat.num_episodes() == 3);
  CHECK(kept_episodes(flat, 2) == std::vector<std::uint64_t>{0, 1});
  CHECK_FALSE(flat.has_mask());
}

TEST_CASE("dataset: token dtype inference and its ambiguity") {
  TempDir dir;
  const std::uint32_t tokens32[] = {1, 2, 3, 4};  // 16 bytes: 8 uint16 or 4 uint32
  write_raw(dir / "a/tokens.bin", tokens32, sizeof tokens32);
  write_index(dir / "a/episodes.idx", {0, 4});  // fits both widths
  CHECK(open_error(dir / "a").find("both uint16 and uint32") != std::string::npos);
  CHECK(EpisodeSplit::open(dir / "a", {TokenDtype::uint32, {}, false}).token_dtype() == TokenDtype::uint32);
  write_index(dir / "a/episodes.idx", {0, 8});  // only uint16 has 8 tokens
  CHECK(EpisodeSplit::open(dir / "a").token_dtype() == TokenDtype::uint16);
  // Neither: the files are damaged, not ambiguous; the error names the record at fault
  // (checked at the width the sizes allow) rather than asking for a dtype.
  write_index(dir / "a/episodes.idx", {0, 9});
  CHECK(open_error(dir / "a").find("episodes.idx': record 0 (start=0, length=9) ends past the end of tokens.bin (8 "
                                   "tokens as uint16)") != std::string::npos);
  write_raw(dir / "a/tokens.bin", tokens32, 15);  // no width fits an odd size
  write_index(dir / "a/episodes.idx", {0, 2});
  CHECK(open_error(dir / "a").find("tokens.bin': size 15 bytes is not a multiple of 2 (uint16) or 4 (uint32)") !=
        std::string::npos);
}

TEST_CASE("dataset: validation errors name the file and the record") {
  TempDir dir;
  const std::uint16_t tokens[] = {1, 2, 3, 4, 5, 6};
  const std::filesystem::path s = dir / "s";
  const EpisodeSplitOptions u16{TokenDtype::uint16, {}, true};

  SUBCASE("missing split directory") {
    CHECK(open_error(dir / "nope").find("does not exist") != std::string::npos);
  }
  SUBCASE("no index at all") {
    std::filesystem::create_directories(s);
    CHECK(open_error(s).find("neither episodes.idx nor shard_") != std::string::npos);
  }
  SUBCASE("missing tokens.bin") {
    write_index(s / "episodes.idx", {0, 2});
    CHECK(open_error(s, u16).find("tokens.bin") != std::string::npos);
  }
  SUBCASE("tokens.bin not a multiple of the dtype") {
    write_raw(s / "tokens.bin", tokens, 7);
    write_index(s / "episodes.idx", {0, 2});
    const std::string e = open_error(s, u16);
    CHECK(e.find("tokens.bin") != std::string::npos);
    CHECK(e.find("not a multiple of 2") != std::string::npos);
  }
  SUBCASE("index size not a multiple of 16") {
    write_raw(s / "tokens.bin", tokens, sizeof tokens);
    const std::uint64_t bad[] = {0, 2, 1};
    write_raw(s / "episodes.idx", bad, 20);
    CHECK(open_error(s, u16).find("not a multiple of 16") != std::string::npos);
  }
  SUBCASE("record past the end of tokens.bin") {
    write_raw(s / "tokens.bin", tokens, sizeof tokens);
    write_index(s / "episodes.idx", {0, 2, 5, 2});
    const std::string e = open_error(s, u16);
    CHECK(e.find("episodes.idx': record 1 (start=5, length=2) ends past the end of tokens.bin (6 tokens as uint16)") !=
          std::string::npos);
  }
  SUBCASE("record whose start + length overflows") {
    write_raw(s / "tokens.bin", tokens, sizeof tokens);
    write_index(s / "episodes.idx", {0, 2, ~std::uint64_t{0} - 1, 4});
    CHECK(open_error(s, u16).find("record 1") != std::string::npos);
  }
  SUBCASE("mask.bin whose size differs from tokens.bin's") {
    write_raw(s / "tokens.bin", tokens, sizeof tokens);
    write_index(s / "episodes.idx", {0, 6});
    const std::uint8_t mask[5] = {};
    write_raw(s / "mask.bin", mask, sizeof mask);
    CHECK(open_error(s, u16).find("mask.bin': size 5 bytes does not match tokens.bin's 6 tokens") != std::string::npos);
    // Also when the run does not use the mask: a damaged file is reported, not skipped.
    EpisodeSplitOptions unused = u16;
    unused.want_mask = false;
    CHECK(open_error(s, unused).find("mask.bin': size 5 bytes does not match") != std::string::npos);
    EpisodeSplitOptions f32 = u16;
    f32.mask_dtype = MaskDtype::float32;
    const std::uint8_t mask6[6] = {};
    write_raw(s / "mask.bin", mask6, sizeof mask6);
    CHECK(open_error(s, f32).find("at float32") != std::string::npos);
  }
  SUBCASE("mask present in some shards and missing in others") {
    write_split(dir.path(), "m", numbered_episodes(6, {4}), TokenDtype::uint16, true, 2);
    std::filesystem::remove(dir / "m/shard_00001/mask.bin");
    const std::string e = open_error(dir / "m", u16);
    CHECK(e.find("mask.bin is present in 1 of 2 shards") != std::string::npos);
    CHECK(e.find("shard_00001") != std::string::npos);
  }
  SUBCASE("both layouts at once") {
    write_split(dir.path(), "m", numbered_episodes(2, {4}), TokenDtype::uint16, true, 2);
    write_index(dir / "m/episodes.idx", {0, 1});
    CHECK(open_error(dir / "m", u16).find("both episodes.idx and shard_") != std::string::npos);
  }
}

TEST_CASE("dataset: float32 masks are read as they are, uint8 masks as 0/1") {
  TempDir dir;
  const std::uint16_t tokens[] = {1, 2, 3, 4};
  write_raw(dir / "s/tokens.bin", tokens, sizeof tokens);
  write_index(dir / "s/episodes.idx", {0, 4});
  const float mask[] = {0.0f, 0.5f, 1.0f, 2.0f};
  write_raw(dir / "s/mask.bin", mask, sizeof mask);
  const EpisodeSplit split = EpisodeSplit::open(dir / "s", {TokenDtype::uint16, {}, true});
  REQUIRE(split.mask_dtype() == MaskDtype::float32);
  std::vector<float> out(4);
  split.read_mask(0, 0, 4, out.data());
  CHECK(out == std::vector<float>{0.0f, 0.5f, 1.0f, 2.0f});
}

TEST_CASE("writer: all or nothing, and never over an older split") {
  TempDir dir;
  const auto split_dir = dir / "train";
  const std::vector<std::uint32_t> tokens = {5, 6, 7};
  const std::vector<std::uint8_t> mask = {0, 1, 1};
  const auto count = [](const std::filesystem::path& d) {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(d)) ++n;
    return n;
  };
  {
    // Nothing is visible until finish(); a writer destroyed without it leaves nothing.
    EpisodeDatasetWriter writer(split_dir, {TokenDtype::uint16, true, 0});
    writer.add(tokens, mask);
    CHECK_FALSE(std::filesystem::exists(split_dir));
  }
  CHECK_FALSE(std::filesystem::exists(split_dir));
  CHECK(count(dir.path()) == 0);  // no temporary directory left behind either

  // Ten shards, then five episodes into the same directory: refused, not mixed.
  {
    EpisodeDatasetWriter writer(split_dir, {TokenDtype::uint16, true, 3});
    for (int i = 0; i < 10; ++i) writer.add(tokens, mask);
    CHECK(writer.finish().shards == 10);
    CHECK(writer.finished());
  }
  CHECK_THROWS_WITH_AS(EpisodeDatasetWriter(split_dir, {TokenDtype::uint16, true, 3}), doctest::Contains("overwrite"),
                       Error);
  {
    EpisodeDatasetWriterOptions options{TokenDtype::uint16, true, 3};
    options.overwrite = true;
    EpisodeDatasetWriter writer(split_dir, options);
    for (int i = 0; i < 5; ++i) writer.add(tokens, mask);
    writer.finish();
  }
  const EpisodeSplit replaced = EpisodeSplit::open(split_dir, {TokenDtype::uint16, {}, false});
  CHECK(replaced.num_episodes() == 5);
  CHECK(replaced.shards().size() == 5);

  // A split directory filled by someone else while writing: finish() refuses to mix.
  const auto other = dir / "val";
  EpisodeDatasetWriter late(other, {TokenDtype::uint16, true, 0});
  late.add(tokens, mask);
  std::filesystem::create_directories(other);
  write_raw(other / "stray.bin", tokens.data(), 4);
  CHECK_THROWS_AS(late.finish(), Error);
  CHECK(count(other) == 1);
  CHECK_THROWS_AS(late.add(tokens, mask), Error);  // discarded
}
