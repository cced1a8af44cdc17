// The episode index at scale: spans read from the mapped episodes.idx (no copy), kept ids
// and epoch orders in the narrowest integer storage, and an index truncated while mapped.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <vector>

#include "dataset/episode_dataset.hpp"
#include "io/mapped_file.hpp"
#include "sampling/episode_sampler.hpp"
#include "sampling/numpy_random.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "util/id_list.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

// Overwrites the length of record `record` of `index` in place (the file keeps its inode,
// so a mapping of it sees the change).
void rewrite_length(const std::filesystem::path& index, std::uint64_t record, std::uint64_t length) {
  std::fstream file(index, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(file);
  file.seekp(static_cast<std::streamoff>(16 * record + 8));
  file.write(reinterpret_cast<const char*>(&length), sizeof length);
  REQUIRE(file);
}

}  // namespace

TEST_CASE("index: spans are read from the mapped episodes.idx, not from a copy") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(12, {3, 5, 8}), TokenDtype::uint16, false, 3);
  const EpisodeSplit split = EpisodeSplit::open(dir / "train", {TokenDtype::uint16, {}, false});
  REQUIRE(split.num_episodes() == 12);
  CHECK(split.spans().size() == 12);
  CHECK(split.spans()[5].length == 8);  // episode 5 is shard 1's second: start relative to its tokens.bin
  CHECK(split.spans()[5].start == 5);
  // A change to the file after open is what the split reads: the records live in the
  // page cache through the mapping, and the split holds no copy of them.
  rewrite_length(dir / "train/shard_00001/episodes.idx", 1, 2);
  CHECK(split.spans()[5].length == 2);
  CHECK(split.spans()[4].length == 5);
  CHECK(split.shards()[1].index.size() == 4 * 16);
}

TEST_CASE("index: kept ids in the narrowest storage, every id kept is stored as nothing") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(10, {1, 4, 6}), TokenDtype::uint16, false, 2);
  const EpisodeSplit split = EpisodeSplit::open(dir / "train", {TokenDtype::uint16, {}, false});
  CHECK(split.shortest_episode() == 1);
  const IdList all = kept_episodes(split, 1);
  CHECK(all.storage() == IdList::Storage::iota);
  CHECK(all.memory_bytes() == 0);
  CHECK(all == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  const IdList some = kept_episodes(split, 5);
  CHECK(some.storage() == IdList::Storage::u32);
  CHECK(some.id_bytes() == 4);
  CHECK(some == std::vector<std::uint64_t>{2, 5, 8});

  // The storage follows the largest id.
  CHECK(IdList(std::vector<std::uint64_t>{0, 7, 0xffffffffULL}).storage() == IdList::Storage::u32);
  CHECK(IdList(std::vector<std::uint64_t>{0, 7, 0x100000000ULL}).storage() == IdList::Storage::u64);
  CHECK(IdList::for_ids_below(0x100000000ULL).storage() == IdList::Storage::u32);
  CHECK(IdList::for_ids_below(0x100000001ULL).storage() == IdList::Storage::u64);
  IdList grown = IdList::for_ids_below(1000, 4);
  for (std::uint64_t id : {9, 3, 999}) grown.push_back(id);
  CHECK(grown == IdList{9, 3, 999});
  CHECK(grown.memory_bytes() == 4 * 4);
}

TEST_CASE("index: epoch orders are numpy's permutation in the kept ids' storage") {
  EpisodeSampler::Settings s;
  s.batch_size = 4;
  s.seed = 42;
  s.split = "train";
  const std::vector<std::uint64_t> perm = numpy_permutation(42, 100);
  CHECK(numpy_permutation_ids(42, 100) == perm);
  CHECK(numpy_permutation_ids(42, 100).storage() == IdList::Storage::u32);

  // Every id kept: the order is the permutation itself.
  const EpisodeSampler identity(IdList::iota(100), s);
  const EpochOrder direct = identity.make_epoch_order(0);
  CHECK(direct.storage() == IdList::Storage::u32);
  CHECK(direct == perm);

  // Narrow kept ids: kept[perm], 4 bytes an id.
  std::vector<std::uint64_t> kept(100);
  std::iota(kept.begin(), kept.end(), 1000);
  const EpochOrder narrow = EpisodeSampler(kept, s).make_epoch_order(0);
  CHECK(narrow.storage() == IdList::Storage::u32);
  CHECK(narrow.memory_bytes() == 100 * 4);
  for (std::size_t i = 0; i < 100; ++i) CHECK(narrow[i] == kept[perm[i]]);

  // Ids past 2^32 stay 8 bytes wide, whatever the width of the positions.
  for (auto& id : kept) id += 0xfffffff0ULL;
  const EpochOrder wide = EpisodeSampler(kept, s).make_epoch_order(0);
  CHECK(wide.storage() == IdList::Storage::u64);
  for (std::size_t i = 0; i < 100; ++i) CHECK(wide[i] == kept[perm[i]]);
}

TEST_CASE("index: episodes.idx truncated while mapped reads as empty episodes and is an io error, not a crash") {
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(600, {5}), TokenDtype::uint32, false);  // > 2 pages of records
  const EpisodeSplit split = EpisodeSplit::open(dir / "train", {TokenDtype::uint32, {}, false});
  CHECK(split.spans()[599].length == 5);
  CHECK_NOTHROW(split.check_intact());
  std::filesystem::resize_file(dir / "train/episodes.idx", 0);
  // The records past the new end read as zeros (an empty episode at offset 0), which no
  // read goes past the end with; check_intact then names the file.
  const EpisodeSpan gone = split.spans()[599];
  CHECK(gone.length == 0);
  CHECK(gone.start == 0);
  std::int64_t token = -1;
  split.read_tokens(599, 0, 0, &token);
  CHECK(MappedFile::any_damaged());
  const std::string message = error_of([&] { split.check_intact(); }, ErrorKind::io);
  CHECK(message.find("episodes.idx' became shorter than when it was opened") != std::string::npos);
}

TEST_CASE("index: a sparse episodes.idx larger than its tokens can explain is refused before it is read" *
          doctest::timeout(60)) {
  test::TempDir dir;
  test::write_split(dir.path(), "train", test::numbered_episodes(4, {3}), TokenDtype::uint16, false);
  // 2^24 records (256 MiB apparent, nothing on disk) over 12 tokens.
  std::filesystem::resize_file(dir / "train" / "episodes.idx", std::uint64_t{16} << 24);
  const std::string message =
      test::error_of([&] { EpisodeSplit::open(dir / "train", EpisodeSplitOptions{}); }, ErrorKind::format);
  CHECK_MESSAGE(message.find("episodes.idx' holds 16777216 records but") != std::string::npos, message);
  CHECK(message.find("at most 12 tokens: an index larger than its data can explain") != std::string::npos);
  // As many records as tokens is still a valid index (zero-length episodes are).
  std::filesystem::resize_file(dir / "train" / "episodes.idx", 16 * 12);
  CHECK(EpisodeSplit::open(dir / "train", EpisodeSplitOptions{}).num_episodes() == 12);
}
