// Corruption caught before it trains: mask values a mask should not hold, and the content
// checksums the writer records in dataset_metadata.json.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "util/sha256.hpp"
#include "dataset/content_checksum.hpp"
#include "dataset/mask_values.hpp"
#include "dataset/dataset_metadata.hpp"
#include "dataset/episode_dataset.hpp"
#include "test_support.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// Two episodes of 4 tokens each in the flat layout, with `mask` (8 values) as mask.bin.
template <typename T>
void write_masked_split(const std::filesystem::path& dir, const std::vector<T>& mask) {
  const std::uint16_t tokens[] = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::uint64_t index[] = {0, 4, 4, 4};
  write_raw(dir / "tokens.bin", tokens, sizeof tokens);
  write_raw(dir / "episodes.idx", index, sizeof index);
  write_raw(dir / "mask.bin", mask.data(), mask.size() * sizeof(T));
}

}  // namespace

TEST_CASE("corruption: scan_mask_values finds uint8 values outside {0, 1} and bad float32 weights") {
  const std::vector<std::uint8_t> bytes = {0, 1, 1, 0, 3, 1, 255};
  const MaskValueScan u8 = scan_mask_values(std::as_bytes(std::span(bytes)), MaskDtype::uint8);
  CHECK(u8.not_binary.count == 2);
  CHECK(u8.not_binary.first_offset == 4);
  CHECK(u8.not_binary.first_value == 3.0f);
  const std::vector<float> weights = {1.0f, 0.5f,          -2.0f, std::numeric_limits<float>::infinity(),
                                      0.0f, std::nanf(""), -0.0f};
  const MaskValueScan f32 = scan_mask_values(std::as_bytes(std::span(weights)), MaskDtype::float32);
  CHECK(f32.negative.count == 1);
  CHECK(f32.negative.first_offset == 2);
  CHECK(f32.not_finite.count == 2);
  CHECK(f32.not_finite.first_offset == 3);
}

TEST_CASE("corruption: the loader refuses NaN or infinite float32 weights at open, mask in use or not") {
  TempDir dir;
  write_masked_split(dir / "train", std::vector<float>{1, 1, 1, 1, 1, std::nanf(""), 1, 1});
  for (const bool want_mask : {true, false}) {
    const std::string message = error_of(
        [&] {
          EpisodeSplit::open(dir / "train", {TokenDtype::uint16, MaskDtype::float32, want_mask});
        },
        ErrorKind::format);
    CHECK(message.find("NaN or infinite") != std::string::npos);
    CHECK(message.find("value offset 5, episode 1 position 1") != std::string::npos);
  }
  write_masked_split(dir / "train", std::vector<float>{1, 1, 1, -std::numeric_limits<float>::infinity(), 1, 1, 1, 1});
  Config c = make_config(dir.path(), 1, 4);
  c.mask_dtype = MaskDtype::float32;
  c.use_loss_mask = true;
  CHECK(error_of([&] { Loader loader(c); }, ErrorKind::format).find("episode 0 position 3") != std::string::npos);
  // Finite weights, negative ones included, open: a negative weight is an inspect --deep finding.
  write_masked_split(dir / "train", std::vector<float>{1, 1, 1, -0.5f, 1, 1, 1, 1});
  CHECK_NOTHROW(Loader{c});
}

TEST_CASE("corruption: a uint8 mask byte above 1 is read as 1 (inspect --deep reports it)") {
  TempDir dir;
  write_masked_split(dir / "train", std::vector<std::uint8_t>{0, 1, 7, 0, 0, 1, 1, 1});
  const EpisodeSplit split = EpisodeSplit::open(dir / "train", {TokenDtype::uint16, MaskDtype::uint8, true});
  std::vector<float> mask(4);
  split.read_mask(0, 0, 4, mask.data());
  CHECK(mask == std::vector<float>{0, 1, 1, 0});
}

TEST_CASE("corruption: the writer records each shard's SHA-256 in dataset_metadata.json, keeping other fields") {
  TempDir dir;
  write_text(dir / "dataset_metadata.json", R"({"token_dtype": "uint16", "eot_token_id": 0,
    "content_sha256": {"train/shard_00009": {"tokens.bin": "00"}, "val/shard_00000": {}}})");
  {
    EpisodeDatasetWriter writer(dir / "train", {TokenDtype::uint16, true, 4});
    const std::vector<std::uint32_t> tokens = {1, 2, 3};
    const std::vector<std::uint8_t> mask = {0, 1, 1};
    for (int i = 0; i < 3; ++i) writer.add(tokens, mask);
    CHECK(writer.finish().shards == 3);
  }
  const DatasetMetadata meta = read_dataset_metadata(dir.path());
  CHECK(meta.token_dtype == TokenDtype::uint16);               // kept
  CHECK(meta.content_sha256.count("train/shard_00009") == 0);  // the split's old entries replaced
  CHECK(meta.content_sha256.count("val/shard_00000") == 1);    // other splits' kept
  for (const char* shard : {"train/shard_00000", "train/shard_00001", "train/shard_00002"}) {
    REQUIRE(meta.content_sha256.count(shard) == 1);
    const auto& files = meta.content_sha256.at(shard);
    CHECK(files.size() == 3);
    for (const auto& [file, hex] : files) CHECK(hex == sha256_file_hex(dir / shard / file));
  }
  // Without record_checksums the metadata is left alone.
  TempDir other;
  {
    EpisodeDatasetWriter writer(other / "train", {TokenDtype::uint16, true, 0, false, false});
    writer.add(std::vector<std::uint32_t>{1, 2}, std::vector<std::uint8_t>{1, 1});
    writer.finish();
  }
  CHECK_FALSE(std::filesystem::exists(other / "dataset_metadata.json"));
  // Malformed checksum entries are format errors.
  write_text(dir / "dataset_metadata.json", R"({"content_sha256": {"train": {"tokens.bin": "xyz"}}})");
  CHECK(error_of([&] { read_dataset_metadata(dir.path()); }, ErrorKind::format).find("64 lowercase hex") !=
        std::string::npos);
}
