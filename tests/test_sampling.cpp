// Sampling order: numpy-identical epoch permutations, epoch coverage, rank slicing, and
// the random mode's determinism and uniformity.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "sampling/episode_sampler.hpp"
#include "sampling/numpy_random.hpp"
#include "pipeline/recent_cache.hpp"
#include "tokenfeed/error.hpp"

using namespace tokenfeed;

TEST_CASE("numpy_permutation matches np.random.RandomState(seed).permutation(n) bit for bit") {
  std::ifstream in(std::string(TOKENFEED_TEST_DATA_DIR) + "/numpy_permutations.txt");
  REQUIRE(in);
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::uint64_t seed = 0, n = 0;
    fields >> seed >> n;
    std::vector<std::uint64_t> expected(n);
    for (auto& v : expected) fields >> v;
    CAPTURE(seed);
    CAPTURE(n);
    CHECK(numpy_permutation(static_cast<std::uint32_t>(seed), n) == expected);
    ++cases;
  }
  CHECK(cases >= 10);
}

namespace {

EpisodeSampler::Settings settings(SamplingMode mode, std::uint64_t batch, bool drop_last = true,
                                  std::uint64_t world = 1, std::uint64_t rank = 0) {
  EpisodeSampler::Settings s;
  s.mode = mode;
  s.batch_size = batch;
  s.drop_last = drop_last;
  s.world_size = world;
  s.rank = rank;
  s.seed = 42;
  s.split = "train";
  return s;
}

std::vector<std::int64_t> batch_ids(const EpisodeSampler& sampler, std::uint64_t step) {
  const SampledBatch plan = sampler.plan(step);
  std::vector<std::int64_t> ids;
  for (std::uint64_t r = 0; r < sampler.settings().batch_size; ++r) ids.push_back(sampler.row_episode(plan, r));
  return ids;
}

}  // namespace

TEST_CASE("epoch order is kept[permutation(epoch_seed + epoch)] and advances per epoch") {
  std::vector<std::uint64_t> kept = {3, 4, 7, 9, 10, 11, 15, 20, 21, 30};  // as if some were filtered out
  EpisodeSampler sampler(kept, settings(SamplingMode::epoch, 2));
  CHECK(sampler.batches_per_epoch() == 5);
  for (std::uint64_t epoch = 0; epoch < 3; ++epoch) {
    const auto perm = numpy_permutation(static_cast<std::uint32_t>(42 + epoch), kept.size());
    std::vector<std::int64_t> expected;
    for (auto p : perm) expected.push_back(static_cast<std::int64_t>(kept[p]));
    std::vector<std::int64_t> got;
    for (std::uint64_t b = 0; b < 5; ++b) {
      const auto ids = batch_ids(sampler, epoch * 5 + b);
      got.insert(got.end(), ids.begin(), ids.end());
      CHECK(sampler.plan(epoch * 5 + b).epoch == epoch);
    }
    CHECK(got == expected);
  }
}

TEST_CASE("epoch_shuffle=false keeps the ascending kept order") {
  auto s = settings(SamplingMode::epoch, 3);
  s.shuffle = false;
  EpisodeSampler sampler({0, 2, 5, 6, 8, 9}, s);
  CHECK(batch_ids(sampler, 0) == std::vector<std::int64_t>{0, 2, 5});
  CHECK(batch_ids(sampler, 1) == std::vector<std::int64_t>{6, 8, 9});
  CHECK(batch_ids(sampler, 2) == std::vector<std::int64_t>{0, 2, 5});
}

TEST_CASE("drop_last=true skips the remainder, drop_last=false fills the last batch and covers every id") {
  std::vector<std::uint64_t> kept(23);
  std::iota(kept.begin(), kept.end(), 0);
  SUBCASE("drop_last") {
    EpisodeSampler sampler(kept, settings(SamplingMode::epoch, 5, true));
    CHECK(sampler.batches_per_epoch() == 4);
    std::set<std::int64_t> seen;
    for (std::uint64_t b = 0; b < 4; ++b) {
      for (auto id : batch_ids(sampler, b)) CHECK(seen.insert(id).second);
      CHECK(sampler.real_rows(sampler.plan(b)) == 5);
    }
    CHECK(seen.size() == 20);
    CHECK(sampler.plan(4).epoch == 1);
  }
  SUBCASE("no drop_last") {
    EpisodeSampler sampler(kept, settings(SamplingMode::epoch, 5, false));
    CHECK(sampler.batches_per_epoch() == 5);
    std::multiset<std::int64_t> seen;
    for (std::uint64_t b = 0; b < 5; ++b) {
      for (auto id : batch_ids(sampler, b)) seen.insert(id);
    }
    CHECK(seen.count(-1) == 2);
    for (std::int64_t id = 0; id < 23; ++id) CHECK(seen.count(id) == 1);
    CHECK(sampler.real_rows(sampler.plan(4)) == 3);
    const auto last = batch_ids(sampler, 4);
    CHECK(last[3] == -1);
    CHECK(last[4] == -1);
  }
}

TEST_CASE("ranks take consecutive slices of the global batch and together cover the epoch once") {
  std::vector<std::uint64_t> kept(50);
  std::iota(kept.begin(), kept.end(), 100);
  for (const bool drop_last : {true, false}) {
    CAPTURE(drop_last);
    const std::uint64_t world = 3, batch = 4;
    std::vector<std::unique_ptr<EpisodeSampler>> ranks;
    for (std::uint64_t r = 0; r < world; ++r) {
      ranks.push_back(std::make_unique<EpisodeSampler>(kept, settings(SamplingMode::epoch, batch, drop_last, world, r)));
    }
    EpisodeSampler single(kept, settings(SamplingMode::epoch, batch * world, drop_last));
    const std::uint64_t per_epoch = ranks[0]->batches_per_epoch();
    CHECK(per_epoch == single.batches_per_epoch());
    CHECK(per_epoch == (drop_last ? 4u : 5u));
    std::multiset<std::int64_t> seen;
    for (std::uint64_t b = 0; b < per_epoch; ++b) {
      std::vector<std::int64_t> global;
      for (auto& rank : ranks) {
        const auto ids = batch_ids(*rank, b);
        global.insert(global.end(), ids.begin(), ids.end());
      }
      CHECK(global == batch_ids(single, b));  // the same as one rank with a batch of B x W
      for (auto id : global) {
        if (id >= 0) seen.insert(id);
      }
    }
    CHECK(seen.size() == (drop_last ? 48u : 50u));
    CHECK(std::set<std::int64_t>(seen.begin(), seen.end()).size() == seen.size());
  }
}

TEST_CASE("epoch mode with fewer kept episodes than a global batch and drop_last forms no batch") {
  // The sampler reports it (the loader decides when it is an error: see test_loader.cpp).
  const EpisodeSampler small({1, 2, 3}, settings(SamplingMode::epoch, 4, true));
  CHECK(small.batches_per_epoch() == 0);
  CHECK_THROWS_AS(small.plan(0), Error);
  const EpisodeSampler filled({1, 2, 3}, settings(SamplingMode::epoch, 4, false));
  CHECK(filled.batches_per_epoch() == 1);
  CHECK(filled.real_rows(filled.plan(0)) == 3);
}

TEST_CASE("random mode: batch k is a pure function of (seed, split, rank, k), in range and uniform") {
  std::vector<std::uint64_t> kept(10);
  std::iota(kept.begin(), kept.end(), 50);
  EpisodeSampler a(kept, settings(SamplingMode::random, 8));
  EpisodeSampler b(kept, settings(SamplingMode::random, 8));
  CHECK(batch_ids(a, 123) == batch_ids(b, 123));
  CHECK(batch_ids(a, 0) != batch_ids(a, 1));
  auto other_split = settings(SamplingMode::random, 8);
  other_split.split = "val";
  CHECK(batch_ids(EpisodeSampler(kept, other_split), 5) != batch_ids(a, 5));
  CHECK(batch_ids(EpisodeSampler(kept, settings(SamplingMode::random, 8, true, 2, 1)), 5) != batch_ids(a, 5));

  std::map<std::int64_t, int> counts;
  const int steps = 2500;  // 20000 draws over 10 ids: 2000 expected each
  for (int k = 0; k < steps; ++k) {
    for (auto id : batch_ids(a, static_cast<std::uint64_t>(k))) ++counts[id];
  }
  CHECK(counts.size() == 10);
  double chi2 = 0;
  for (const auto& [id, count] : counts) {
    CHECK(id >= 50);
    CHECK(id < 60);
    chi2 += (count - 2000.0) * (count - 2000.0) / 2000.0;
  }
  CHECK(chi2 < 27.9);  // chi-square, 9 degrees of freedom, p = 0.001
}

TEST_CASE("recent cache: a value made ahead in the background is not made again, a failed one is" *
          doctest::timeout(60)) {
  RecentCache<int> cache(2);
  std::atomic<int> makes{0};
  std::atomic<bool> release{false};
  // A slow make in the background: get() of that key waits for it instead of making it.
  cache.prefetch(7, [&] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++makes;
    return 70;
  });
  cache.prefetch(8, [&] { ++makes; return 80; });  // ignored: one background make at a time
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release = true;
  });
  CHECK(*cache.get(7, [&] { ++makes; return -1; }) == 70);
  releaser.join();
  CHECK(makes == 1);
  CHECK(*cache.get(8, [&] { ++makes; return 81; }) == 81);  // made in the foreground
  CHECK(makes == 2);
  // A background make that throws stores nothing; get() makes it again and throws itself.
  cache.prefetch(9, []() -> int { throw std::runtime_error("seed out of range"); });
  CHECK_THROWS_WITH_AS(cache.get(9, []() -> int { throw std::runtime_error("seed out of range"); }), "seed out of range",
                       std::runtime_error);
  // Capacity 2: the oldest goes.
  cache.prefetch(10, [] { return 100; });
  CHECK(*cache.get(10, [] { return -1; }) == 100);
  CHECK(*cache.get(7, [] { return 71; }) == 71);  // 7 was evicted by 8 and 10
}

TEST_CASE("the next epoch's order is made ahead, plans are the same as without it") {
  std::vector<std::uint64_t> kept(1000);
  std::iota(kept.begin(), kept.end(), 0);
  const EpisodeSampler sampler(kept, settings(SamplingMode::epoch, 10, true));
  // Planning epoch 0 starts epoch 1's order in the background; its orders are numpy's.
  const SampledBatch first = sampler.plan(0);
  const auto expected = numpy_permutation(43, 1000);
  CHECK(*sampler.epoch_order(1) == expected);
  CHECK(*sampler.plan(100).order == expected);  // batch 0 of epoch 1
  CHECK(first.order->size() == 1000);
}
