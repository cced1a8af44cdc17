// What a killed `tokenfeed prepare` or dataset writer leaves (its staging directory) is never
// read as a dataset, and the next writer of the same split removes it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "io/staging_dir.hpp"
#include "test_support.hpp"
#include "tokenfeed/dataset_writer.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;
namespace fs = std::filesystem;

namespace {

// A pid no process can have (above PID_MAX_LIMIT): its staging directories are a dead run's.
const std::string kDead = std::to_string(0x7ffffff0);

std::vector<std::string> hidden_entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().filename().string().starts_with(".")) names.push_back(e.path().filename().string());
  }
  return names;
}

void write_episodes(const fs::path& split_dir, std::size_t episodes) {
  EpisodeDatasetWriter w(split_dir, {.token_dtype = TokenDtype::uint16, .write_mask = false});
  for (std::size_t e = 0; e < episodes; ++e) {
    const std::vector<std::uint32_t> tokens = {static_cast<std::uint32_t>(e + 1), 2, 3, 4, 5};
    w.add(tokens, {});
  }
  w.finish();
}

}  // namespace

TEST_CASE("unfinished output: staging directory names") {
  CHECK(is_staging_dir_name(".data.tmp-123-0123456789abcdef"));
  CHECK(is_staging_dir_name(".data.tmp-123"));
  CHECK(is_staging_dir_name(".train.tmp-7-x"));
  CHECK_FALSE(is_staging_dir_name("data.tmp-123"));    // not hidden
  CHECK_FALSE(is_staging_dir_name("..tmp-123"));       // no NAME
  CHECK_FALSE(is_staging_dir_name(".data.tmp-x123"));  // no pid
  CHECK_FALSE(is_staging_dir_name(".data.tmp-123-"));  // a dash and no suffix
  CHECK_FALSE(is_staging_dir_name(".data.replaced-123-4"));
  CHECK_FALSE(is_staging_dir_name("data"));
}

TEST_CASE("unfinished output: the loader refuses a prepare's staging directory, however it is named") {
  TempDir tmp;
  const fs::path staging = tmp / (".data.tmp-" + kDead + "-0123456789abcdef");
  write_split(staging, "train", numbered_episodes(8, {4}));
  fs::create_directory_symlink(staging, tmp / "link");
  for (const fs::path& given : {staging, fs::path(staging.string() + "/"), tmp / "link"}) {
    CAPTURE(given);
    const std::string what = error_of([&] { Loader loader(make_config(given, 2, 4)); }, ErrorKind::io);
    CHECK(what.find("is not a dataset: it is the staging directory of an unfinished `tokenfeed prepare` or dataset "
                    "writer that was killed") != std::string::npos);
    CHECK(what.find(given.string()) != std::string::npos);
  }
  // The same files under a name that is no staging name open as a dataset.
  fs::rename(staging, tmp / "data.tmp-1");
  Loader loader(make_config(tmp / "data.tmp-1", 2, 4));
  CHECK(loader.get_batch().step() == 0);
}

TEST_CASE(
    "unfinished output: a writer killed mid-write leaves no split, and the next one removes its staging "
    "directory" *
    doctest::timeout(60)) {
  TempDir tmp;
  const fs::path train = tmp / "train";
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the writer, killed between two episodes; never back into doctest
    try {
      EpisodeDatasetWriter w(train, {.token_dtype = TokenDtype::uint16, .write_mask = false});
      const std::vector<std::uint32_t> tokens = {1, 2, 3, 4, 5};
      w.add(tokens, {});
      ::kill(::getpid(), SIGKILL);
    } catch (...) {
    }
    ::_exit(3);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK_FALSE(fs::exists(train));
  const std::vector<std::string> left = hidden_entries(tmp.path());
  REQUIRE(left.size() == 1);
  CHECK(left[0].starts_with(".train.tmp-" + std::to_string(child) + "-"));

  // Never read as a dataset: its train split exists only as that staging directory.
  const std::string what = error_of([&] { Loader loader(make_config(tmp.path(), 2, 4)); }, ErrorKind::io);
  CHECK(what.find("has no train split, only '" + left[0] +
                  "', the staging directory of an unfinished dataset "
                  "writer that was killed") != std::string::npos);

  // Kept: a directory holding what the writer never writes, and a live writer's (locked).
  const fs::path foreign = tmp / (".train.tmp-" + kDead + "-cccccccccccccccc");
  write_text(foreign / "notes.txt", "mine");
  StagingDir live(fs::absolute(train));
  write_text(live.path() / "shard_00000" / "tokens.bin", "xx");

  write_episodes(train, 6);  // the rerun: removes the dead writer's directory, then succeeds
  CHECK_FALSE(fs::exists(tmp / left[0]));
  CHECK(fs::exists(foreign / "notes.txt"));
  CHECK(fs::exists(live.path() / "shard_00000" / "tokens.bin"));
  Loader loader(make_config(tmp.path(), 2, 4));
  CHECK(loader.split_info("train").episodes == 6);
}

TEST_CASE("unfinished output: a complete train split with a stale writer's directory beside it still opens") {
  TempDir tmp;
  write_split(tmp.path(), "train", numbered_episodes(8, {4}));
  write_text(tmp / (".train.tmp-" + kDead + "-0123456789abcdef") / "shard_00000" / "tokens.bin", "xx");
  Loader loader(make_config(tmp.path(), 2, 4));
  CHECK(loader.split_info("train").episodes == 8);
}
