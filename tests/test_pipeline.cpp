// The split pipeline on its own, with fake sources: order under parallel decode, failures
// in a decode stage reaching pop(), stop() waking a blocked consumer, prompt shutdown, and
// a start/stop stress test with random consumer delays (run under ThreadSanitizer in CI).
#include <doctest/doctest.h>

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "pipeline/admitter.hpp"
#include "pipeline/split_pipeline.hpp"
#include "pipeline/trainer_pace.hpp"
#include "pipeline/trainer_waiter.hpp"
#include "test_support.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/loader.hpp"

using namespace tokenfeed;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

// Fills every cell of batch k with k; optionally sleeps, jitters, or fails at one step.
class FakeSource final : public BatchSource {
 public:
  std::uint64_t fail_at = UINT64_MAX;
  std::chrono::microseconds delay{0};
  bool busy = false;  // spend the delay on the CPU (a decode's work), not asleep
  bool jitter = false;
  // Decodes made on this thread (the trainer's, for the tests that ask) are counted.
  std::thread::id counted_thread;
  mutable std::atomic<int> counted_decodes{0};
  // The names of the other threads that decoded (for the tests that ask).
  bool record_threads = false;
  mutable std::mutex names_mutex;
  mutable std::set<std::string> decoder_names;

  BatchPlan plan(std::uint64_t step) override {
    BatchPlan p;
    p.step = step;
    p.batch_in_epoch = step;
    return p;
  }
  void decode(const BatchPlan& plan, detail::BatchSlot& slot) const override {
    if (plan.step == fail_at) throw std::runtime_error("tokens.bin vanished at step " + std::to_string(plan.step));
    auto d = delay;
    if (jitter) d = std::chrono::microseconds((plan.step * 7919) % 300);  // later steps may finish first
    if (d.count() > 0 && busy) {
      // Work, not a sleep: on a loaded machine (a sanitizer, tests in parallel) a sleep
      // ends late, and a decode's time would then depend on how busy the machine is.
      const auto until = Clock::now() + d;
      while (Clock::now() < until) {
      }
    } else if (d.count() > 0) {
      std::this_thread::sleep_for(d);
    }
    if (std::this_thread::get_id() == counted_thread) {
      counted_decodes.fetch_add(1, std::memory_order_relaxed);
    } else if (record_threads) {
      char name[16] = {};
      pthread_getname_np(pthread_self(), name, sizeof name);
      const std::lock_guard lock(names_mutex);
      decoder_names.insert(name);
    }
    std::fill(slot.x.begin(), slot.x.end(), static_cast<std::int64_t>(plan.step));
    slot.step = plan.step;
  }
  std::uint64_t batches_in_epoch(std::uint64_t) const override { return 0; }
  std::uint64_t samples_in_epoch(std::uint64_t) const override { return 0; }
};

std::shared_ptr<detail::BatchPool> make_pool(std::size_t depth) {
  return std::make_shared<detail::BatchPool>(depth + Loader::kMaxHeldBatches, detail::BatchShape{2, 3, false}, "train");
}

// Pops steps [0, count) and checks each is the step due, filled by FakeSource; calls
// `after(step)` after each (the trainer's step).
void expect_steps(SplitPipeline& pipeline, detail::BatchPool& pool, std::uint64_t count,
                  std::optional<Clock::time_point> deadline = std::nullopt,
                  const std::function<void(std::uint64_t)>& after = {}) {
  double waited = 0;
  for (std::uint64_t step = 0; step < count; ++step) {
    detail::BatchSlot* slot = pipeline.pop(waited, deadline);
    REQUIRE(slot != nullptr);
    REQUIRE(slot->step == step);
    CHECK(slot->x[5] == static_cast<std::int64_t>(step));
    pool.release(slot);
    if (after) after(step);
  }
}

}  // namespace

TEST_CASE("pipeline: parallel decode delivers batches in step order" * doctest::timeout(60)) {
  FakeSource source;
  source.jitter = true;
  for (const std::size_t threads : {1u, 2u, 4u}) {
    auto pool = make_pool(6);
    SplitPipeline pipeline(source, pool, {6, threads, 10});
    for (std::uint64_t step = 10; step < 60; ++step) {
      double waited = 0;
      detail::BatchSlot* slot = pipeline.pop(waited);
      CHECK(slot->step == step);
      CHECK(slot->x[5] == static_cast<std::int64_t>(step));
      pool->release(slot);
    }
  }
}

TEST_CASE("pipeline: a decode failure reaches pop() in order with its original message" * doctest::timeout(60)) {
  FakeSource source;
  source.fail_at = 3;
  auto pool = make_pool(4);
  SplitPipeline pipeline(source, pool, {4, 2, 0});
  expect_steps(pipeline, *pool, 3);
  double waited = 0;
  CHECK_THROWS_WITH_AS(pipeline.pop(waited), "tokens.bin vanished at step 3", std::runtime_error);
  CHECK_THROWS_WITH_AS(pipeline.pop(waited), "tokens.bin vanished at step 3", std::runtime_error);
}

TEST_CASE("pipeline: stop() wakes a consumer blocked on an empty ring, shutdown is prompt" * doctest::timeout(60)) {
  FakeSource source;
  source.delay = 200ms;  // every batch is slow: the consumer blocks
  auto pool = make_pool(2);
  auto pipeline = std::make_unique<SplitPipeline>(source, pool, SplitPipeline::Options{2, 2, 0});
  std::thread stopper([&] {
    std::this_thread::sleep_for(30ms);
    pipeline->stop();
  });
  const auto start = Clock::now();
  double waited = 0;
  CHECK_THROWS_AS(pipeline->pop(waited), Error);
  stopper.join();
  CHECK(Clock::now() - start < 150ms);
  const auto destroy_start = Clock::now();
  pipeline.reset();  // waits only for decodes already running (one batch), not for the queue
  CHECK(Clock::now() - destroy_start < 1s);
}

TEST_CASE("pipeline: pop with a deadline returns nothing when it passes, and wakes as soon as a batch is ready" *
          doctest::timeout(60)) {
  FakeSource source;
  source.delay = 300ms;
  auto pool = make_pool(1);
  SplitPipeline pipeline(source, pool, {1, 1, 0});
  double waited = 0;
  auto start = Clock::now();
  CHECK(pipeline.pop(waited, Clock::now() + 30ms) == nullptr);  // nothing consumed
  const auto timed_out_after = Clock::now() - start;
  CHECK(timed_out_after >= 30ms);
  CHECK(timed_out_after < 200ms);
  // A long deadline: woken by the batch (~300 ms after the start), not by the deadline.
  start = Clock::now();
  detail::BatchSlot* slot = pipeline.pop(waited, Clock::now() + 10s);
  REQUIRE(slot != nullptr);
  CHECK(slot->step == 0);  // the timed-out call took nothing
  CHECK(Clock::now() - start < 2s);
  pool->release(slot);
  // stop() wakes a timed waiter too.
  std::thread stopper([&] {
    std::this_thread::sleep_for(30ms);
    pipeline.stop();
  });
  start = Clock::now();
  CHECK_THROWS_AS(pipeline.pop(waited, Clock::now() + 10s), Error);
  stopper.join();
  CHECK(Clock::now() - start < 2s);
}

TEST_CASE("pipeline: pops with deadlines made one right after another are one wait, a pop made later waits anew" *
          doctest::timeout(60)) {
  using us = std::chrono::duration<double, std::micro>;
  FakeSource source;
  source.delay = 300ms;
  auto pool = make_pool(1);
  SplitPipeline pipeline(source, pool, {1, 1, 0});
  double waited = 0;
  detail::BatchSlot* slot = nullptr;
  SUBCASE("calls one right after another: the wait counts from the first") {
    const auto first_call = Clock::now();
    int calls = 0;
    // As the Python module waits: short slices, each call made at once after the last.
    while (slot == nullptr && Clock::now() - first_call < 20s) {
      slot = pipeline.pop(waited, Clock::now() + 20ms);
      ++calls;
    }
    REQUIRE(slot != nullptr);
    const double elapsed_us = us(Clock::now() - first_call).count();
    CHECK(calls > 1);
    CHECK(waited <= elapsed_us);
    CHECK(waited >= 0.8 * elapsed_us);  // not the last slice's 20 ms
  }
  SUBCASE("a call well after one that timed out: a wait of its own") {
    CHECK(pipeline.pop(waited, Clock::now() + 20ms) == nullptr);
    std::this_thread::sleep_for(60ms);  // the trainer did something else (or took a Ctrl-C)
    const auto second_call = Clock::now();
    slot = pipeline.pop(waited, Clock::now() + 20s);
    REQUIRE(slot != nullptr);
    CHECK(waited <= us(Clock::now() - second_call).count());
  }
  pool->release(slot);
}

TEST_CASE("pipeline: get_batch records its wait, a waiting consumer sleeps rather than spins" * doctest::timeout(60)) {
  FakeSource source;
  source.delay = 20ms;
  auto pool = make_pool(1);
  SplitPipeline pipeline(source, pool, {1, 1, 0});
  double waited = 0;
  // The consumer's own thread: the process's CPU time would also count what a sanitizer
  // spends symbolizing the reports it then suppresses (TBB's uninstrumented internals).
  const auto thread_cpu_seconds = [] {
    rusage usage{};
    getrusage(RUSAGE_THREAD, &usage);
    return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  };
  const double cpu_start = thread_cpu_seconds();
  for (int i = 0; i < 5; ++i) pool->release(pipeline.pop(waited));
  const double cpu_seconds = thread_cpu_seconds() - cpu_start;
  CHECK(waited > 1000);         // the last pop waited for a 20 ms decode
  CHECK(cpu_seconds < 0.08);    // ~100 ms of waiting burned well under a core
}

TEST_CASE(
    "pipeline: a trainer that sleeps is woken for a quarter of the depth at once, and takes them without waiting" *
    doctest::timeout(60)) {
  FakeSource source;
  source.delay = 15ms;  // far past any spin: a pop that finds the ring empty sleeps
  auto pool = make_pool(8);
  SplitPipeline pipeline(source, pool, {8, 1, 0});  // depth 8: a sleeper is woken for 2 batches
  double waited = 0;
  int sleeps = 0;
  bool after_sleep = false;
  for (std::uint64_t step = 0; step < 12; ++step) {
    detail::BatchSlot* slot = pipeline.pop(waited);
    CHECK(slot->step == step);
    pool->release(slot);
    if (after_sleep) CHECK(waited == 0);  // the second of the batches it was woken for
    after_sleep = waited > 1000;
    sleeps += after_sleep ? 1 : 0;
  }
  CHECK(sleeps >= 3);  // the trainer outruns a 15 ms decoder: it sleeps again and again
}

namespace {

// Runs one decoder at `delay` a batch with a trainer (this thread) taking `steps` batches as
// fast as it can; returns how many of them the trainer decoded itself.
int decoded_by_trainer(std::chrono::microseconds delay, std::size_t depth, std::uint64_t steps,
                       std::optional<Clock::time_point> deadline = std::nullopt) {
  FakeSource source;
  source.delay = delay;
  source.busy = true;
  source.counted_thread = std::this_thread::get_id();
  auto pool = make_pool(depth);
  SplitPipeline pipeline(source, pool, {depth, 1, 0});
  expect_steps(pipeline, *pool, steps, deadline);
  return source.counted_decodes.load();
}

}  // namespace

TEST_CASE("pipeline: a trainer that finds the ring empty decodes beside the decoders, in step order" *
          doctest::timeout(60)) {
  // The ring runs empty again and again, and the trainer decodes instead of waiting (20 us
  // a batch keeps the depth's 4 far under the 2 ms bound, also under a sanitizer with other
  // tests running: a decode preempted for a while still leaves the mean under 500 us). A
  // help that finds every task taken counts as a miss, and misses pause helping for a while:
  // enough steps for several tries.
  CHECK(decoded_by_trainer(20us, 4, 1000) > 0);
}

TEST_CASE("pipeline: the trainer never decodes for a pop with a deadline, nor when the depth takes over 2 ms" *
          doctest::timeout(60)) {
  CHECK(decoded_by_trainer(20us, 8, 100, Clock::now() + 20s) == 0);
  CHECK(decoded_by_trainer(1ms, 4, 12) == 0);  // 4 batches of depth: twice the bound
}

TEST_CASE("pipeline: one decode thread is the pipeline's own named thread, more are TBB's workers" *
          doctest::timeout(60)) {
  // A lone decoder runs on the admitter thread, which sleeps as soon as the graph is idle,
  // not on a TBB worker, which spins after every burst (a slow trainer's bursts: 2 ms steps
  // with the ring refilled every three quarters of the depth).
  for (const std::size_t threads : {1u, 2u}) {
    CAPTURE(threads);
    FakeSource source;
    source.counted_thread = std::this_thread::get_id();
    source.record_threads = true;
    auto pool = make_pool(8);
    SplitPipeline pipeline(source, pool, {8, threads, 0});
    expect_steps(pipeline, *pool, 40, std::nullopt, [](std::uint64_t step) {
      if (step % 8 == 0) std::this_thread::sleep_for(2ms);  // the graph goes idle between bursts
    });
    const std::lock_guard lock(source.names_mutex);
    REQUIRE_FALSE(source.decoder_names.empty());
    const bool lone = source.decoder_names == std::set<std::string>{SplitPipeline::kLoneDecoderThreadName};
    CHECK(lone == (threads == 1));
  }
}

TEST_CASE("batch pool: a decoder gets back the slot it filled last, else the one released last") {
  detail::BatchPool pool(4, detail::BatchShape{2, 3, false}, "train");
  detail::BatchSlot* a = pool.acquire(0);
  detail::BatchSlot* b = pool.acquire(1);
  detail::BatchSlot* c = pool.acquire(0);
  CHECK(a->decoder == 0);
  CHECK(b->decoder == 1);
  pool.release(a);
  pool.release(b);
  pool.release(c);                         // released last, and decoder 0's
  CHECK(pool.acquire(1) == b);             // decoder 1's own, though c and a came back after it
  CHECK(pool.acquire(0) == c);             // decoder 0's, the later of its two
  detail::BatchSlot* d = pool.acquire(2);  // decoder 2 filled none: the last released of the rest
  CHECK(d == a);
  CHECK(d->decoder == 2);
  detail::BatchSlot* never_used = pool.acquire();  // no decoder: the last released (here the only one)
  CHECK(never_used != nullptr);
  CHECK(never_used->decoder == -1);
  CHECK(pool.acquire() == nullptr);
}

TEST_CASE("pipeline: a failure is delivered at once to a trainer waiting for several batches" * doctest::timeout(60)) {
  FakeSource source;
  source.fail_at = 0;  // nothing but the failure will ever be ready
  auto pool = make_pool(16);
  SplitPipeline pipeline(source, pool, {16, 1, 0});  // depth 16: a sleeper waits for 4
  double waited = 0;
  const auto start = Clock::now();
  CHECK_THROWS_WITH_AS(pipeline.pop(waited), "tokens.bin vanished at step 0", std::runtime_error);
  CHECK(Clock::now() - start < 5s);
  // A deadline pop takes whatever is ready when the deadline passes, fewer than it hoped
  // for: at depth 32 a sleeper waits for 8 batches, which arrive in runs of 4, the first
  // after 4 decodes (1 s), the second after 8 (2 s). The deadline sits between them, with
  // margins that hold on a loaded machine under a sanitizer.
  FakeSource slow;
  slow.delay = 250ms;
  auto slow_pool = make_pool(32);
  SplitPipeline slow_pipeline(slow, slow_pool, {32, 1, 0});
  detail::BatchSlot* slot = slow_pipeline.pop(waited, Clock::now() + 1600ms);
  REQUIRE(slot != nullptr);
  CHECK(slot->step == 0);
  slow_pool->release(slot);
  // stop() wakes a trainer sleeping for several batches.
  std::thread stopper([&] {
    std::this_thread::sleep_for(30ms);
    slow_pipeline.stop();
  });
  const auto stop_start = Clock::now();
  for (int i = 0; i < 10; ++i) {  // the ready ones, if any, then the wait that stop() ends
    try {
      slow_pool->release(slow_pipeline.pop(waited));
    } catch (const Error&) {
      break;
    }
  }
  stopper.join();
  CHECK(Clock::now() - stop_start < 2s);
}

TEST_CASE("pipeline: nothing is handed out after stop(), not even batches already in the ring" * doctest::timeout(60)) {
  FakeSource source;
  auto pool = make_pool(8);
  SplitPipeline pipeline(source, pool, {8, 2, 0});
  double waited = 0;
  pool->release(pipeline.pop(waited));
  // Let the ring fill up (the source takes no time), then stop: the ready batches must
  // not come out.
  std::this_thread::sleep_for(100ms);
  pipeline.stop();
  for (int i = 0; i < 3; ++i) CHECK_THROWS_AS(pipeline.pop(waited), Error);
}

namespace {

bool same_batch(const Batch& a, const Batch& b) {
  const auto eq = [](auto x, auto y) { return std::equal(x.begin(), x.end(), y.begin(), y.end()); };
  return a.step() == b.step() && eq(a.x(), b.x()) && eq(a.y(), b.y()) && eq(a.mask(), b.mask()) &&
         eq(a.episode_ids(), b.episode_ids()) && eq(a.labels(), b.labels()) && eq(a.token_weights(), b.token_weights());
}

}  // namespace

TEST_CASE("loader stress: start and stop loaders many times with random consumer delays" * doctest::timeout(240)) {
  test::TempDir dir;
  test::write_split(dir.path(), "train", test::numbered_episodes(64, {5, 40, 12, 70}), TokenDtype::uint16, true, 2);
  test::write_split(dir.path(), "val", test::numbered_episodes(16, {9, 33}));
  std::mt19937 rng(7);
  for (int round = 0; round < 60; ++round) {
    Config c = test::make_config(dir.path(), 1 + static_cast<std::int64_t>(rng() % 4), 32);
    c.use_loss_mask = true;
    c.batch_sampling_mode = rng() % 2 ? SamplingMode::epoch : SamplingMode::random;
    // The reference: the same stream from one thread at depth 1.
    Config reference_config = c;
    reference_config.decode_threads = 1;
    reference_config.prefetch_depth = 1;
    Loader reference(reference_config);
    c.decode_threads = 1 + static_cast<std::int64_t>(rng() % 4);
    c.prefetch_depth = rng() % 4 == 0 ? 0 : 1 + static_cast<std::int64_t>(rng() % 8);  // 0: auto
    auto loader = std::make_unique<Loader>(c);
    std::vector<std::pair<Batch, Batch>> held;  // (batch, its reference), kept across stop()
    const int batches = static_cast<int>(rng() % 12);
    for (int i = 0; i < batches; ++i) {
      const char* split = rng() % 3 == 0 ? "val" : "train";
      Batch b = loader->get_batch(split);
      Batch expected = reference.get_batch(split);
      CHECK(same_batch(b, expected));
      if (held.size() < 2 && rng() % 4 == 0) held.emplace_back(std::move(b), std::move(expected));
      if (rng() % 2) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    }
    if (round % 3 == 0) {
      // Stop from another thread while the trainer may be blocked: every later get_batch
      // throws Error(usage) and never hands out a batch.
      std::thread stopper([&] { loader->stop(); });
      for (int i = 0; i < 4; ++i) {
        try {
          Batch b = loader->get_batch();
          CHECK(same_batch(b, reference.get_batch()));  // before the stop took effect
        } catch (const Error& e) {
          CHECK(e.kind() == ErrorKind::usage);
        }
      }
      stopper.join();
      CHECK_THROWS_AS(loader->get_batch(), Error);
      CHECK_THROWS_AS(loader->get_batch("val"), Error);
    }
    // Held batches stay valid, and unchanged, after stop() and after the loader is gone.
    if (rng() % 2) loader.reset();
    for (const auto& [b, expected] : held) CHECK(same_batch(b, expected));
  }
}

TEST_CASE("admitter: a hand-off without a wake waits for wake(), reclaim() or the backstop, each admission sent once" *
          doctest::timeout(60)) {
  using namespace std::chrono_literals;
  std::atomic<long long> sent{0};
  std::atomic<int> calls{0};
  auto admitter = std::make_unique<Admitter>(
      [&](long long n) {
        sent.fetch_add(n);
        calls.fetch_add(1);
      },
      "tf-test-admit");
  const auto wait_for = [&](long long expected) {
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (sent.load() != expected && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    return sent.load() == expected;
  };
  admitter->hand_off(3, true);
  CHECK(wait_for(3));
  // Handed off without a wake: held until the trainer wakes the thread.
  admitter->hand_off(2, false);
  admitter->hand_off(4, false);
  CHECK(admitter->holding());
  admitter->wake();
  CHECK(wait_for(9));
  CHECK_FALSE(admitter->holding());
  // Taken back by the trainer (about to wait on an empty ring): the thread never sends them.
  admitter->hand_off(5, false);
  const std::uint32_t back = admitter->reclaim();
  CHECK(back + static_cast<std::uint32_t>(sent.load() - 9) == 5);  // the thread may have raced to some
  std::this_thread::sleep_for(Admitter::kBackstop + 20ms);
  CHECK(sent.load() + back == 14);
  // Left with the thread while nobody wakes it (a trainer away): sent by its backstop look.
  admitter->hand_off(1, false);
  CHECK(wait_for(15 - back));
  // join(): a call with nothing to send (a lone decoder runs work the trainer admitted),
  // once per join, and admissions handed off meanwhile still go out exactly once.
  const int before = calls.load();
  admitter->join();
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (calls.load() == before && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  CHECK(calls.load() == before + 1);
  CHECK(sent.load() == 15 - back);
  admitter->hand_off(2, false);
  admitter->join();
  CHECK(wait_for(17 - back));
  std::this_thread::sleep_for(Admitter::kBackstop + 20ms);
  CHECK(sent.load() == 17 - back);
  CHECK_FALSE(admitter->holding());
  const auto start = std::chrono::steady_clock::now();
  admitter.reset();  // stop() and join: woken, not left to its backstop
  CHECK(std::chrono::steady_clock::now() - start < Admitter::kBackstop);
}

TEST_CASE("trainer pace: a moving average of the steps, which one long pause does not throw off") {
  TrainerPace pace;
  const Clock::time_point t0{};
  Clock::time_point t = t0;
  const auto step = [&](Clock::duration d) {
    pace.returned(t);
    t += d;
    pace.popped(t);
  };
  CHECK(pace.step() == 0ns);
  CHECK_FALSE(pace.pause_for(10).has_value());
  for (int i = 0; i < 20; ++i) step(2ms);
  CHECK(pace.step() == 2ms);
  CHECK(pace.paced());
  CHECK(pace.pause_for(10) == std::chrono::nanoseconds(static_cast<std::int64_t>(TrainerPace::kMargin * 20e6)));
  CHECK_FALSE(pace.pause_for(0).has_value());
  // An evaluation of 10 s counts as kOutlier steps: the mean moves by (4 - 1) / 8 of a step.
  step(10s);
  CHECK(pace.step() == 2750us);  // 2 ms + (8 ms - 2 ms) / 8
  for (int i = 0; i < 40; ++i) step(2ms);
  CHECK(pace.step() < 2ms + 20us);
  // A trainer that speeds up to 10 us steps is soon no longer paced: it wakes the admitter.
  for (int i = 0; i < 60; ++i) step(10us);
  CHECK_FALSE(pace.paced());
  CHECK_FALSE(pace.pause_for(10).has_value());
}

TEST_CASE("trainer waiter: a sleeper is woken by the batches it asked for, by a failure, by an interrupt" *
          doctest::timeout(60)) {
  // Each case: the trainer asks for 3 batches and sleeps on the signal it saw; `wake` is
  // what the other side does. A wake that is missing leaves the sleeper asleep until the
  // test's timeout fails it.
  const auto sleeps_until = [](const std::function<void(TrainerWaiter&)>& wake) {
    TrainerWaiter waiter;
    std::atomic<bool> woke{false};
    waiter.want(3);
    const std::uint32_t seen = waiter.seen();
    std::thread trainer([&] {
      waiter.sleep(seen);
      woke = true;
    });
    std::this_thread::sleep_for(20ms);  // asleep on the futex by now (a wake before is fine too)
    wake(waiter);
    trainer.join();
    return woke.load();
  };
  SUBCASE("the batches asked for") {
    CHECK(sleeps_until([](TrainerWaiter& w) { w.pushed(3, false); }));
  }
  SUBCASE("a failure, however few batches are ready") {
    CHECK(sleeps_until([](TrainerWaiter& w) { w.pushed(1, true); }));
  }
  SUBCASE("an interrupt (stop)") {
    CHECK(sleeps_until([](TrainerWaiter& w) { w.interrupt(); }));
  }
}

TEST_CASE("trainer waiter: a timed sleep ends at its deadline, or early when its batches are ready" *
          doctest::timeout(60)) {
  TrainerWaiter waiter;
  waiter.want(2);
  auto start = Clock::now();
  waiter.sleep_until(waiter.seen(), start + 30ms);
  CHECK(Clock::now() - start >= 30ms);

  const std::uint32_t seen = waiter.seen();
  std::thread collator([&] {
    std::this_thread::sleep_for(20ms);
    waiter.pushed(2, false);
  });
  start = Clock::now();
  waiter.sleep_until(seen, start + 50s);  // the timeout above fails a sleep that is not woken
  CHECK(waiter.seen() != seen);
  CHECK(Clock::now() - start < 40s);
  collator.join();
}

TEST_CASE("admitter: after a send it looks again on its own at next_look(), once, then waits for a wake" *
          doctest::timeout(60)) {
  std::atomic<long long> sent{0};
  std::atomic<int> looks{0};
  // The first look comes 5 ms after its send, the next ones 1 ms after theirs.
  auto admitter = std::make_unique<Admitter>(
      [&](long long n) { sent.fetch_add(n); }, "tf-test-admit",
      [&] { return std::optional<std::chrono::nanoseconds>(looks.fetch_add(1) == 0 ? 5ms : 1ms); });
  const auto within = [](const auto& done, Clock::duration limit) {
    const auto deadline = Clock::now() + limit;
    while (!done() && Clock::now() < deadline) std::this_thread::sleep_for(100us);
    return done();
  };
  admitter->hand_off(3, true);
  REQUIRE(within([&] { return sent.load() == 3 && looks.load() == 1; }, 20s));  // going to sleep
  // Handed off without a wake: the look sends it, well before the backstop.
  const auto handed = Clock::now();
  admitter->hand_off(2, false);
  CHECK(within([&] { return sent.load() == 5; }, 20s));
  CHECK(Clock::now() - handed < Admitter::kBackstop - 10ms);
  CHECK(admitter->wakes() == 1);  // the first hand-off's only
  // The look 1 ms after that send finds nothing; from then on the thread waits for a wake or
  // its backstop (a futex timeout never ends early: 50 ms after that look at the soonest).
  std::this_thread::sleep_for(30ms);
  admitter->hand_off(1, false);
  std::this_thread::sleep_for(10ms);
  CHECK(admitter->holding());
  CHECK(looks.load() == 2);  // one per send
  admitter->wake();
  CHECK(within([&] { return sent.load() == 6; }, 20s));
  CHECK(admitter->wakes() == 2);
}

TEST_CASE("pipeline: a trainer at a steady pace hands its admissions over without waking the admitter" *
          doctest::timeout(60)) {
  // At 2 ms a step, each refill comes from the admitter's own look after its last send (see
  // TrainerPace), before the ring runs low: the trainer pays no futex wake. Without the
  // looks it wakes the admitter for every refill, once every three quarters of the depth
  // (here 13 times, in every run).
  // The first refill may come before the trainer's pace is known; and on a loaded machine
  // (tests in parallel, a sanitizer) a look may come late, or the decoders may not get a CPU
  // soon enough to refill before the low mark, and the trainer then wakes the admitter as
  // it should. So the fewest wakes of up to three runs count: the looks' absence shows in
  // every run, a loaded minute rarely in three.
  for (const std::size_t threads : {1u, 2u}) {
    CAPTURE(threads);
    std::uint64_t fewest = UINT64_MAX;
    for (int run = 0; run < 3 && fewest > 6; ++run) {
      FakeSource source;
      auto pool = make_pool(16);
      SplitPipeline pipeline(source, pool, {16, threads, 0});
      expect_steps(pipeline, *pool, 160, std::nullopt, [](std::uint64_t) { std::this_thread::sleep_for(2ms); });
      fewest = std::min(fewest, pipeline.admitter_wakes());
    }
    CHECK(fewest <= 6);
  }
}

TEST_CASE("batch pool: a slot's pages beyond a smaller batch's cells go back to the kernel, and return when written") {
  tokenfeed::detail::BatchShape shape;
  shape.rows = 8;
  shape.cols = 8192;  // x: 512 KiB, 128 pages of 4 KiB
  shape.packed = true;
  const std::unique_ptr<tokenfeed::detail::BatchSlot> slot = tokenfeed::detail::make_slot(shape);
  const std::size_t x_bytes = slot->x.size() * sizeof(std::int64_t);
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  REQUIRE(x_bytes / page >= 64);
  std::fill(slot->x.begin(), slot->x.end(), 7);  // every page resident
  CHECK(tokenfeed::test::resident_pages(slot->x.data(), x_bytes) >= x_bytes / page - 1);
  // A batch of 2 x 1024 cells (a smaller stage): beyond its 16 KiB only pages cut by the
  // boundaries may stay; the cells it keeps keep their values.
  slot->begin_batch(0, 0, 0, 2, 2, 1024);
  CHECK(slot->resident_cells == 2048);
  const std::size_t kept = 2048 * sizeof(std::int64_t);
  CHECK(tokenfeed::test::resident_pages(slot->x.data() + 2048, x_bytes - kept) == 0);
  CHECK(tokenfeed::test::resident_pages(slot->labels.data() + 2048, x_bytes - kept) == 0);
  CHECK(std::all_of(slot->x.begin(), slot->x.begin() + 2048, [](std::int64_t v) { return v == 7; }));
  // A full batch again: no release; its writes bring the pages back.
  slot->begin_batch(1, 0, 1, 8, 8, 8192);
  CHECK(slot->resident_cells == 8 * 8192);
  std::fill(slot->x.begin(), slot->x.end(), 9);
  CHECK(tokenfeed::test::resident_pages(slot->x.data(), x_bytes) >= x_bytes / page - 1);
  // An equal batch releases nothing.
  slot->begin_batch(2, 0, 2, 8, 8, 8192);
  CHECK(tokenfeed::test::resident_pages(slot->x.data(), x_bytes) >= x_bytes / page - 1);
}
