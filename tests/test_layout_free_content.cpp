// The layout-free content identity of a split (dataset/layout_free_content.hpp) and the
// resume fingerprint's use of it: a one-process prepare-text run and a 3-task run merged with
// other shard boundaries are the same content (fingerprint and SHA-256), a token or a
// document boundary changed is not; the sampled fingerprint of a larger split; a resume
// state crosses the two layouts for episodes (their batches are the same) and is refused,
// saying why, for a token stream (whose windows never cross a file).
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dataset/content_fingerprint.hpp"
#include "dataset/layout_free_content.hpp"
#include "io/npy.hpp"
#include "test_support.hpp"
#include "tokenfeed/batch.hpp"
#include "tokenfeed/config.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/prepare_text.hpp"

namespace fs = std::filesystem;
using namespace tokenfeed;

namespace {

// JSONL of 600 documents of 1 to 120 words (seeded).
void write_corpus(const fs::path& path) {
  std::mt19937 rng(7);
  const char* const words[] = {"loader", "token", "shard", "naïve", "données", "東京", "a", "bc"};
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 600; ++i) {
    std::string text = "doc " + std::to_string(i);
    const int n = 1 + static_cast<int>(rng() % 120);
    for (int w = 0; w < n; ++w) text += std::string(" ") + words[rng() % 8];
    out << "{\"text\": \"" << text << "\"}\n";
  }
}

PrepareTextOptions options(const fs::path& input, const fs::path& out, CorpusFormat format,
                           std::uint64_t shard_tokens) {
  PrepareTextOptions o;
  o.inputs = {input.string()};
  o.output_dir = out;
  o.format = format;
  o.val_split = 0.1;
  o.shard_tokens = shard_tokens;
  o.workers = 1;
  return o;
}

// The corpus prepared in one process (shards of 3000 tokens) as DIR/one, and as 3 tasks
// (shards of 2000 tokens) merged as DIR/merged.
void prepare_both(const fs::path& dir, CorpusFormat format) {
  fs::create_directories(dir);
  write_corpus(dir / "c.jsonl");
  prepare_text_corpus(options(dir / "c.jsonl", dir / "one", format, 3000));
  for (std::uint32_t i = 0; i < 3; ++i) {
    PrepareTextOptions o = options(dir / "c.jsonl", dir / "merged", format, 2000);
    o.task = PrepareTextTask{i, 3, 20000};
    prepare_text_corpus(o);
  }
  merge_text_parts(dir / "merged");
}

// The token count of each shard of a token stream's split: where its shards end.
std::vector<std::uint64_t> shard_tokens(const TokenStreamSplit& split) {
  std::vector<std::uint64_t> out;
  for (const StreamFile& f : split.files()) out.push_back(f.tokens);
  return out;
}

std::vector<std::uint64_t> shard_episodes(const EpisodeSplit& split) {
  std::vector<std::uint64_t> out;
  for (const EpisodeShard& s : split.shards()) out.push_back(s.episodes);
  return out;
}

// Adds `delta` to the uint16 at byte `offset` of `path`.
void bump_u16(const fs::path& path, std::uint64_t offset, int delta) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::uint16_t v = 0;
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(reinterpret_cast<char*>(&v), 2);
  v = static_cast<std::uint16_t>(v + delta);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(&v), 2);
}

// Adds `delta` to the uint64 at byte `offset` of `path`.
void bump_u64(const fs::path& path, std::uint64_t offset, std::int64_t delta) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  std::uint64_t v = 0;
  f.seekg(static_cast<std::streamoff>(offset));
  f.read(reinterpret_cast<char*>(&v), 8);
  v = static_cast<std::uint64_t>(static_cast<std::int64_t>(v) + delta);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(reinterpret_cast<const char*>(&v), 8);
}

// The byte offset of the first element of the .npy file at `path`.
std::uint64_t npy_data_offset(const fs::path& path) {
  const std::vector<char> bytes = test::read_bytes(path);
  return parse_npy_header(std::as_bytes(std::span<const char>(bytes)), path.string()).data_offset;
}

Config loader_config(const fs::path& dataset, DatasetMode mode) {
  Config c = test::make_config(dataset, 2, 32);
  c.dataset_mode = mode;
  c.batch_sampling_mode = SamplingMode::epoch;
  return c;
}

// Every token and label of the next `n` train batches.
std::vector<std::int64_t> next_batches(Loader& loader, int n) {
  std::vector<std::int64_t> out;
  for (int i = 0; i < n; ++i) {
    const Batch b = loader.get_batch("train");
    out.insert(out.end(), b.tokens().begin(), b.tokens().end());
    out.insert(out.end(), b.labels().begin(), b.labels().end());
  }
  return out;
}

}  // namespace

TEST_CASE("layout-free content: a token stream prepared in one process and by 3 merged tasks is the same" *
          doctest::timeout(120)) {
  test::TempDir dir;
  prepare_both(dir.path(), CorpusFormat::tokens);
  for (const char* name : {"train", "val"}) {
    CAPTURE(name);
    const TokenStreamSplit one = TokenStreamSplit::open(dir / "one", name, std::nullopt);
    const TokenStreamSplit merged = TokenStreamSplit::open(dir / "merged", name, std::nullopt);
    REQUIRE(one.total_tokens() == merged.total_tokens());
    CHECK(shard_tokens(one) != shard_tokens(merged));  // the shards end elsewhere
    // The bytes-and-names content fingerprint sees the layout; the layout-free values do not.
    CHECK(content_fingerprint(dir / "one" / name) != content_fingerprint(dir / "merged" / name));
    CHECK(layout_free_fingerprint(one).content == layout_free_fingerprint(merged).content);
    CHECK(layout_free_fingerprint(one).documents == layout_free_fingerprint(merged).documents);
    CHECK(layout_free_digest(one) == layout_free_digest(merged));
  }
  const TokenStreamSplit before = TokenStreamSplit::open(dir / "merged", "train", std::nullopt);
  const LayoutFreeFingerprint fingerprint = layout_free_fingerprint(before);
  const std::string digest = layout_free_digest(before);
  // One token of the second shard changed: both values change.
  REQUIRE(before.files()[1].documents.value_or(0) >= 3);
  const fs::path shard = before.files()[1].map.path();
  bump_u16(shard, npy_data_offset(shard) + 2 * 17, 1);
  {
    const TokenStreamSplit after = TokenStreamSplit::open(dir / "merged", "train", std::nullopt);
    CHECK(layout_free_fingerprint(after).content != fingerprint.content);
    CHECK(layout_free_fingerprint(after).documents == fingerprint.documents);
    CHECK(layout_free_digest(after) != digest);
  }
  bump_u16(shard, npy_data_offset(shard) + 2 * 17, -1);
  // One document boundary moved (the same tokens): both values change.
  const fs::path docs = shard.parent_path() / (shard.stem().string() + ".docs.npy");
  bump_u64(docs, npy_data_offset(docs) + 8 * 1, 1);
  const TokenStreamSplit moved = TokenStreamSplit::open(dir / "merged", "train", std::nullopt);
  CHECK(layout_free_fingerprint(moved).documents != fingerprint.documents);
  CHECK(layout_free_fingerprint(moved).content != fingerprint.content);
  CHECK(layout_free_digest(moved) != digest);
}

TEST_CASE("layout-free content: episodes prepared in one process and by 3 merged tasks are the same" *
          doctest::timeout(120)) {
  test::TempDir dir;
  prepare_both(dir.path(), CorpusFormat::episodes);
  for (const char* name : {"train", "val"}) {
    CAPTURE(name);
    const EpisodeSplit one = EpisodeSplit::open(dir / "one" / name);
    const EpisodeSplit merged = EpisodeSplit::open(dir / "merged" / name);
    REQUIRE(one.num_episodes() == merged.num_episodes());
    CHECK(shard_episodes(one) != shard_episodes(merged));
    CHECK(content_fingerprint(dir / "one" / name) != content_fingerprint(dir / "merged" / name));
    CHECK(layout_free_fingerprint(one).content == layout_free_fingerprint(merged).content);
    CHECK(layout_free_digest(one) == layout_free_digest(merged));
  }
  const fs::path shard = dir / "merged" / "train" / "shard_00001";
  const auto values = [&] {
    const EpisodeSplit split = EpisodeSplit::open(dir / "merged" / "train");
    return std::make_pair(layout_free_fingerprint(split), layout_free_digest(split));
  };
  const auto [fingerprint, digest] = values();
  bump_u16(shard / "tokens.bin", 2 * 5, 1);  // one token
  CHECK(values().first.content != fingerprint.content);
  CHECK(values().second != digest);
  bump_u16(shard / "tokens.bin", 2 * 5, -1);
  CHECK(values().second == digest);
  // Episode 0 one token shorter, episode 1 one longer: the same tokens, another boundary.
  bump_u64(shard / "episodes.idx", 8, -1);
  bump_u64(shard / "episodes.idx", 16, -1);
  bump_u64(shard / "episodes.idx", 24, 1);
  CHECK(values().first.documents != fingerprint.documents);
  CHECK(values().first.content != fingerprint.content);
  CHECK(values().second != digest);
}

TEST_CASE("layout-free content: above 1M tokens sampled blocks, the same in any shards, masks included" *
          doctest::timeout(120)) {
  test::TempDir dir;
  const EpisodeSplitOptions as_uint32{TokenDtype::uint32, std::nullopt, false};
  // 1.33M tokens: more than the 1M hashed whole, so that blocks are sampled.
  std::vector<test::TestEpisode> episodes = test::numbered_episodes(2000, {400, 700, 900, 661});
  test::write_split(dir / "one", "train", episodes, TokenDtype::uint32, true, 1);
  test::write_split(dir / "five", "train", episodes, TokenDtype::uint32, true, 5);
  const EpisodeSplit one = EpisodeSplit::open(dir / "one" / "train", as_uint32);
  const EpisodeSplit five = EpisodeSplit::open(dir / "five" / "train", as_uint32);
  REQUIRE(one.total_tokens() > kLayoutFreeFullTokens);
  CHECK(layout_free_fingerprint(one).content == layout_free_fingerprint(five).content);
  CHECK(layout_free_digest(one) == layout_free_digest(five));

  // A token in the first block, one in the gap after it (unsampled: only the digest sees
  // it), and a mask value in the first block; episode 0 is the first of tokens.bin.
  const auto changed = [&](const char* file, std::uint64_t offset, bool uint32) {
    test::write_split(dir / "other", "train", episodes, TokenDtype::uint32, true, 1);
    const fs::path path = dir / "other" / "train" / file;
    std::vector<char> bytes = test::read_bytes(path);
    bytes[uint32 ? 4 * offset : offset] ^= 1;
    test::write_raw(path, bytes.data(), bytes.size());
    const EpisodeSplit other = EpisodeSplit::open(dir / "other" / "train", as_uint32);
    return std::make_pair(layout_free_fingerprint(other).content != layout_free_fingerprint(one).content,
                          layout_free_digest(other) != layout_free_digest(one));
  };
  std::uint64_t at = 0;  // episodes lie one after another from the start of tokens.bin
  for (std::uint64_t e = 0; e < 40; ++e) {
    REQUIRE(one.spans()[e].start == at);
    at += one.spans()[e].length;
  }
  REQUIRE(at > kLayoutFreeBlockTokens + 100);
  CHECK(changed("tokens.bin", 5, true) == std::make_pair(true, true));
  CHECK(changed("tokens.bin", kLayoutFreeBlockTokens + 100, true) == std::make_pair(false, true));
  CHECK(changed("mask.bin", 7, false) == std::make_pair(true, true));
}

TEST_CASE("layout-free content: a state resumes across re-sharded episodes, not across a re-sharded token stream" *
          doctest::timeout(120)) {
  test::TempDir dir;
  prepare_both(dir.path(), CorpusFormat::episodes);
  prepare_both(dir.path() / "tokens", CorpusFormat::tokens);
  for (const DatasetMode mode : {DatasetMode::sft_episode, DatasetMode::sft_packed}) {
    CAPTURE(to_string(mode));
    Loader one(loader_config(dir / "one", mode));
    Loader merged(loader_config(dir / "merged", mode));
    // Episodes are read by global id: the batches are the same whatever the shards.
    CHECK(merged.fingerprint() == one.fingerprint());
    CHECK(next_batches(merged, 3) == next_batches(one, 3));
    Loader resumed(loader_config(dir / "merged", mode));
    resumed.load_state(one.save_state());
    CHECK(next_batches(resumed, 3) == next_batches(one, 3));
  }
  Loader one(loader_config(dir / "tokens" / "one", DatasetMode::token_stream));
  (void)one.get_batch("train");
  Loader merged(loader_config(dir / "tokens" / "merged", DatasetMode::token_stream));
  CHECK(merged.fingerprint() != one.fingerprint());
  const std::string message = test::error_of([&] { merged.load_state(one.save_state()); }, ErrorKind::state);
  CAPTURE(message);
  CHECK(message.find("the files of the token stream's 'train' split differ") != std::string::npos);
  CHECK(message.find("windows never cross a file") != std::string::npos);
}
