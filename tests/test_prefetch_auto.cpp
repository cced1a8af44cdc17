// prefetch_depth=auto: the config key, the depths a split starts and ends with, growth
// when the trainer waits on production jitter that depth absorbs, no growth when depth
// cannot help, the memory cap, the log line and the stats, read-ahead planning ahead
// without changing the output. Timing-based cases assert on direction and bounds only
// (sleeps, not spins, so a loaded 2-core machine does not flip them).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/split_pipeline.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"
#include "tokenfeed/log.hpp"

using namespace tokenfeed;
using namespace std::chrono_literals;

namespace {

// Batch k holds k. Decoding sleeps `fast`, and `slow` every `period`-th step (jitter).
class TimedSource : public BatchSource {
 public:
  std::chrono::microseconds fast{0}, slow{0};
  std::uint64_t period = 0;  // 0: never slow
  std::uint64_t fail_plan_at = UINT64_MAX;

  BatchPlan plan(std::uint64_t step) override {
    if (step == fail_plan_at) throw std::runtime_error("index vanished at step " + std::to_string(step));
    BatchPlan p;
    p.step = step;
    p.batch_in_epoch = step;
    return p;
  }
  void decode(const BatchPlan& plan, detail::BatchSlot& slot) const override {
    const auto d = period != 0 && plan.step % period == period - 1 ? slow : fast;
    if (d.count() > 0) std::this_thread::sleep_for(d);
    std::fill(slot.x.begin(), slot.x.end(), static_cast<std::int64_t>(plan.step));
    slot.step = plan.step;
  }
  std::uint64_t batches_in_epoch(std::uint64_t) const override { return 0; }
  std::uint64_t samples_in_epoch(std::uint64_t) const override { return 0; }
};

struct LogCapture {
  std::mutex mutex;
  std::vector<std::string> lines;
  LogHandler previous;
  LogCapture() {
    previous = set_log_handler([this](LogLevel, std::string_view line) {
      std::lock_guard lock(mutex);
      lines.emplace_back(line);
    });
  }
  ~LogCapture() { set_log_handler(previous); }
  std::size_t count(const std::string& needle) {
    std::lock_guard lock(mutex);
    std::size_t n = 0;
    for (const auto& l : lines) n += l.find(needle) != std::string::npos ? 1 : 0;
    return n;
  }
};

struct AutoPipeline {
  std::shared_ptr<detail::BatchPool> pool;
  std::unique_ptr<SplitPipeline> pipeline;
  SplitPipeline::Depths depths;

  AutoPipeline(BatchSource& source, detail::BatchShape shape, std::int64_t memory_mb, std::size_t threads) {
    depths = SplitPipeline::plan_depths(0, memory_mb, detail::BatchPool::bytes_per_slot(shape), threads,
                                        Loader::kMaxHeldBatches);
    pool = std::make_shared<detail::BatchPool>(depths.initial + Loader::kMaxHeldBatches, shape, "train",
                                               depths.max + Loader::kMaxHeldBatches);
    pipeline = std::make_unique<SplitPipeline>(source, pool,
                                               SplitPipeline::Options{depths.initial, threads, 0, depths.max});
  }

  // Pops `n` batches in order, sleeping `step` after each; returns how many waited > 1 ms.
  int consume(std::uint64_t first, std::uint64_t n, std::chrono::microseconds step) {
    int long_waits = 0;
    for (std::uint64_t k = first; k < first + n; ++k) {
      double waited = 0;
      detail::BatchSlot* slot = pipeline->pop(waited);
      CHECK(slot->step == k);
      CHECK(slot->x[0] == static_cast<std::int64_t>(k));
      long_waits += waited > 1000 ? 1 : 0;
      pool->release(slot);
      if (step.count() > 0) std::this_thread::sleep_for(step);
    }
    return long_waits;
  }
};

detail::BatchShape small_shape() { return detail::BatchShape{2, 3, false}; }

}  // namespace

TEST_CASE("prefetch auto: the config key takes auto (0), is the default, and prefetch_memory_mb is checked") {
  Config c;
  CHECK(c.prefetch_depth == 0);
  CHECK(c.prefetch_memory_mb == 512);
  set_config_value(c, "prefetch_depth", "12");
  CHECK(c.prefetch_depth == 12);
  set_config_value(c, "prefetch_depth", " auto ");
  CHECK(c.prefetch_depth == 0);
  set_config_value(c, "prefetch_memory_mb", "64");
  CHECK(c.prefetch_memory_mb == 64);
  bool printed_auto = false;
  for (const auto& [key, value] : config_entries(c)) printed_auto |= key == "prefetch_depth" && value == "auto";
  CHECK(printed_auto);
  CHECK_THROWS_WITH_AS(set_config_value(c, "prefetch_depth", "deep"), doctest::Contains("prefetch_depth"), Error);

  c.dataset_dir = "/d";
  c.batch_size = 8;
  c.block_size = 16;
  CHECK_NOTHROW(validate_config(c));
  Config bad = c;
  bad.prefetch_memory_mb = 0;
  CHECK_THROWS_WITH_AS(validate_config(bad), doctest::Contains("'prefetch_memory_mb'"), Error);
  bad = c;
  bad.prefetch_depth = 4097;
  CHECK_THROWS_WITH_AS(validate_config(bad), doctest::Contains("'prefetch_depth'"), Error);

  const Config xml = parse_config_xml(
      "<training><dataset_dir>d</dataset_dir><batch_size>1</batch_size><block_size>4</block_size>"
      "<prefetch_depth>auto</prefetch_depth><prefetch_memory_mb>32</prefetch_memory_mb></training>",
      "/base");
  CHECK(xml.prefetch_depth == 0);
  CHECK(xml.prefetch_memory_mb == 32);
}

TEST_CASE("prefetch auto: start and maximum depths from threads and the memory cap") {
  // A fixed depth is used as it is.
  CHECK(SplitPipeline::plan_depths(7, 1, 1 << 30, 1, 4).initial == 7);
  CHECK(SplitPipeline::plan_depths(7, 1, 1 << 30, 1, 4).max == 7);
  // Auto: kAutoStartDepth per decode thread to start; as many as fit in the cap with the
  // held batches.
  const auto mib = std::size_t{1} << 20;
  auto d = SplitPipeline::plan_depths(0, 64, mib, 1, 4);
  CHECK(d.initial == SplitPipeline::kAutoStartDepth);
  CHECK(d.max == 60);
  d = SplitPipeline::plan_depths(0, 64, mib, 2, 4);
  CHECK(d.initial == 2 * SplitPipeline::kAutoStartDepth);
  d = SplitPipeline::plan_depths(0, 64, mib, 20, 4);  // many threads: up to the maximum
  CHECK(d.initial == 60);
  d = SplitPipeline::plan_depths(0, 10, mib, 1, 4);  // the start never exceeds the maximum
  CHECK(d.initial == 6);
  CHECK(d.max == 6);
  // A cap too small for even the held batches still runs, at depth 1.
  d = SplitPipeline::plan_depths(0, 1, 4 * mib, 2, 4);
  CHECK(d.initial == 1);
  CHECK(d.max == 1);
  // Tiny batches: bounded by kMaxAutoDepth, not by memory.
  d = SplitPipeline::plan_depths(0, 512, 256, 1, 4);
  CHECK(d.max == SplitPipeline::kMaxAutoDepth);
}

TEST_CASE("prefetch auto: grows when the trainer waits on jitter that production absorbs on average" *
          doctest::timeout(60)) {
  LogCapture log;
  TimedSource source;
  // Fast batches take no time (so a loaded machine, or a sanitizer, cannot make production
  // look slower than the trainer); every 48th takes 40 ms: longer than the starting depth
  // of ready batches covers at a 2 ms step (16 x 2 ms), shorter than twice that.
  source.slow = 40ms;
  source.period = 48;
  AutoPipeline p(source, small_shape(), 512, 1);
  const std::size_t start = p.depths.initial;
  REQUIRE(start == SplitPipeline::kAutoStartDepth);
  CHECK(p.pipeline->prefetch_depth() == start);
  // Mean production ~0.8 ms per batch against a 2 ms step: it keeps up on average, but a
  // 40 ms batch drains the 16 ready batches (32 ms), so the trainer waits until the depth
  // grows.
  p.consume(0, 400, 2ms);
  const std::size_t grown = p.pipeline->prefetch_depth();
  CHECK(grown > start);
  CHECK(grown <= p.depths.max);
  CHECK(p.pool->size() == grown + Loader::kMaxHeldBatches);
  CHECK(log.count("split=train prefetch_depth=" + std::to_string(start) + " (auto start, max ") == 1);
  CHECK(log.count("(auto, max ") >= 1);  // each growth is logged too
}

TEST_CASE("prefetch auto: a growth is applied one run of slots at a time, logged once at its depth" *
          doctest::timeout(60)) {
  LogCapture log;
  // As above (jitter the starting depth does not absorb), and each decode notes the pool's
  // size: the collator applies a growth between decodes, one run's slots (4) per call, so
  // that it never stops pushing batches for long. All at once, a doubling from 16 would show
  // as a jump of 16 slots.
  struct SizeWatchingSource final : TimedSource {
    // Set once the pipeline (which starts decoding at once) exists; growth comes later.
    std::atomic<const detail::BatchPool*> pool{nullptr};
    mutable std::mutex mutex;
    mutable std::vector<std::size_t> sizes;
    void decode(const BatchPlan& plan, detail::BatchSlot& slot) const override {
      if (const detail::BatchPool* watched = pool.load(std::memory_order_acquire)) {
        std::lock_guard lock(mutex);
        sizes.push_back(watched->size());
      }
      TimedSource::decode(plan, slot);
    }
  } source;
  source.slow = 40ms;
  source.period = 48;
  AutoPipeline p(source, small_shape(), 512, 1);
  source.pool.store(p.pool.get(), std::memory_order_release);
  p.consume(0, 400, 2ms);
  REQUIRE(p.pipeline->prefetch_depth() > SplitPipeline::kAutoStartDepth);
  std::lock_guard lock(source.mutex);
  std::size_t largest_jump = 0;
  for (std::size_t i = 1; i < source.sizes.size(); ++i) {
    if (source.sizes[i] > source.sizes[i - 1])
      largest_jump = std::max(largest_jump, source.sizes[i] - source.sizes[i - 1]);
  }
  // At most two collates between two decodes of the one decoder.
  CHECK(largest_jump <= 8);
  for (std::size_t depth = SplitPipeline::kAutoStartDepth + 1; depth <= p.pipeline->prefetch_depth(); ++depth) {
    const bool doubling = depth == 32 || depth == 64;
    CHECK(log.count("prefetch_depth=" + std::to_string(depth) + " (auto, max ") == (doubling ? 1u : 0u));
  }
}

TEST_CASE("prefetch auto: the growth rule doubles only when the waits come from jitter production absorbs") {
  // No waits: nothing to fix.
  CHECK(SplitPipeline::next_auto_depth(3, 64, 0, 1000, 100, 1) == 3);
  // Waits while production (100 us a batch) keeps up with a 1 ms step: jitter, double.
  CHECK(SplitPipeline::next_auto_depth(3, 64, 2, 1000, 100, 1) == 6);
  CHECK(SplitPipeline::next_auto_depth(48, 64, 2, 1000, 100, 1) == 64);  // capped
  CHECK(SplitPipeline::next_auto_depth(64, 64, 9, 1000, 100, 1) == 64);
  // A batch takes longer than a step on one decoder, but four decoders keep up; two do not.
  CHECK(SplitPipeline::next_auto_depth(16, 128, 1, 1000, 3000, 4) == 32);
  CHECK(SplitPipeline::next_auto_depth(16, 128, 1, 1000, 3000, 2) == 16);
  // Production slower than the trainer: the trainer waits in any case; depth cannot help.
  CHECK(SplitPipeline::next_auto_depth(16, 64, 32, 5, 20, 1) == 16);
}

TEST_CASE("prefetch auto: stays at its start when the consumer is faster than production" * doctest::timeout(60)) {
  TimedSource source;
  source.fast = 1ms;
  AutoPipeline p(source, small_shape(), 512, 1);
  p.consume(0, 300, 0us);  // waits on every step: a deeper queue would drain the same way
  CHECK(p.pipeline->prefetch_depth() == p.depths.initial);
  CHECK(p.pool->size() == p.depths.initial + Loader::kMaxHeldBatches);
}

TEST_CASE("prefetch auto: growth stops at the memory cap" * doctest::timeout(60)) {
  TimedSource source;
  source.slow = 60ms;  // every 48th batch: more than 16 ready batches cover at a 3 ms step
  source.period = 48;  // mean ~1.3 ms per batch against a 3 ms step: jitter, so it grows
  // 32 x 1024 slots hold about a MiB each: a 40 MiB cap leaves room for about 30.
  const detail::BatchShape shape{32, 1024, false};
  const std::size_t slot_bytes = detail::BatchPool::bytes_per_slot(shape);
  const std::int64_t cap_mb = 40;
  AutoPipeline p(source, shape, cap_mb, 1);
  REQUIRE(p.depths.max > p.depths.initial);
  REQUIRE((p.depths.max + Loader::kMaxHeldBatches) * slot_bytes <= static_cast<std::size_t>(cap_mb) << 20);
  p.consume(0, 300, 3ms);
  CHECK(p.pipeline->prefetch_depth() > p.depths.initial);
  CHECK(p.pipeline->prefetch_depth() <= p.depths.max);
  CHECK(p.pool->size() <= p.depths.max + Loader::kMaxHeldBatches);
  CHECK(p.pool->size() * slot_bytes <= static_cast<std::size_t>(cap_mb) << 20);
}

TEST_CASE("prefetch: a planning failure arrives in order although the sampler plans ahead" * doctest::timeout(60)) {
  TimedSource source;
  source.fail_plan_at = 5;
  auto pool = std::make_shared<detail::BatchPool>(4 + Loader::kMaxHeldBatches, small_shape(), "train");
  SplitPipeline pipeline(source, pool, {4, 2, 0});
  double waited = 0;
  for (std::uint64_t step = 0; step < 5; ++step) {
    detail::BatchSlot* slot = pipeline.pop(waited);
    CHECK(slot->step == step);
    pool->release(slot);
  }
  CHECK_THROWS_WITH_AS(pipeline.pop(waited), "index vanished at step 5", std::runtime_error);
}

TEST_CASE("prefetch auto: the loader reports the depth in effect, the output equals a fixed depth's" *
          doctest::timeout(120)) {
  test::TempDir dir;
  test::write_split(dir.path(), "train", test::numbered_episodes(48, {3, 17, 9, 30, 2}), TokenDtype::uint16, true, 3);
  Config fixed = test::make_config(dir.path(), 4, 16);
  fixed.use_loss_mask = true;
  fixed.decode_threads = 1;
  fixed.prefetch_depth = 1;
  Config automatic = fixed;
  automatic.prefetch_depth = 0;
  Loader a(fixed), b(automatic);
  CHECK(b.split_stats("train").prefetch_depth == 0);  // no pipeline yet
  for (int i = 0; i < 40; ++i) {
    Batch x = a.get_batch();
    Batch y = b.get_batch();
    REQUIRE(x.step() == y.step());
    CHECK(std::equal(x.x().begin(), x.x().end(), y.x().begin(), y.x().end()));
    CHECK(std::equal(x.y().begin(), x.y().end(), y.y().begin(), y.y().end()));
    CHECK(std::equal(x.mask().begin(), x.mask().end(), y.mask().begin(), y.mask().end()));
  }
  CHECK(a.split_stats("train").prefetch_depth == 1);
  CHECK(b.split_stats("train").prefetch_depth >= SplitPipeline::kAutoStartDepth);
}
