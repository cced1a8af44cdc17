// Creating and destroying many loaders leaks no threads, mappings, file descriptors or
// memory: counts from /proc/self after a warm-up, against the same counts after 2,000
// loaders (each taking a batch, so that its pipeline, pool and mappings were all made).
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "test_support.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace tokenfeed::test;

namespace {

struct ProcCounts {
  long threads = 0;
  long rss_kb = 0;
  long maps = 0;
  long fds = 0;
};

ProcCounts proc_counts() {
  ProcCounts c;
  std::ifstream status("/proc/self/status");
  for (std::string key; status >> key;) {
    if (key == "Threads:") status >> c.threads;
    if (key == "VmRSS:") status >> c.rss_kb;
  }
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) ++c.maps;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++c.fds;
  return c;
}

}  // namespace

TEST_CASE("churn: 2,000 loaders created and destroyed leak no threads, mappings, fds or memory" *
          doctest::timeout(280)) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr int kLoaders = 200;  // sanitized builds are ~10x slower; ASan's quarantine holds freed memory
  constexpr bool kCheckRss = false;
#else
  constexpr int kLoaders = 2000;
  constexpr bool kCheckRss = true;
#endif
  TempDir dir;
  write_split(dir.path(), "train", numbered_episodes(64, {5, 9, 17}), TokenDtype::uint16, true, 2);
  write_split(dir.path(), "val", numbered_episodes(16, {7}), TokenDtype::uint16, true, 1);
  Config c = make_config(dir.path(), 4, 16);
  c.use_loss_mask = true;
  c.token_dtype = TokenDtype::uint16;
  c.decode_threads = 2;
  const auto cycle = [&] {
    Loader loader(c);
    (void)loader.get_batch("train");
    (void)loader.get_batch("val");
  };
  for (int i = 0; i < 50; ++i) cycle();  // warm-up: TBB's workers and allocator pools
  const ProcCounts before = proc_counts();
  for (int i = 0; i < kLoaders; ++i) cycle();
  // A oneTBB worker that served the last loaders may still be on its way out (its thread and
  // stack mappings go with it): on a loaded machine that takes a while. A leak stays, so the
  // counts are given a few seconds to settle.
  const auto settled = [&](const ProcCounts& now) {
    return now.threads <= before.threads && now.fds <= before.fds && now.maps <= before.maps + 8;
  };
  ProcCounts after = proc_counts();
  for (int i = 0; i < 500 && !settled(after); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = proc_counts();
  }
  INFO("threads " << before.threads << " -> " << after.threads << ", maps " << before.maps << " -> " << after.maps
                  << ", fds " << before.fds << " -> " << after.fds << ", rss " << before.rss_kb << " -> "
                  << after.rss_kb << " KiB");
  CHECK(after.threads <= before.threads);
  CHECK(after.fds <= before.fds);
  CHECK(after.maps <= before.maps + 8);  // the allocator may map an arena or two; a leak maps 6 files per loader
  if (kCheckRss) CHECK(after.rss_kb <= before.rss_kb + 16 * 1024);
}
