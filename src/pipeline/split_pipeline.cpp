#include "pipeline/split_pipeline.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <optional>

#include <oneapi/tbb/info.h>

#include "pipeline/batch_producer.hpp"
#include "pipeline/trainer_pace.hpp"
#include "pipeline/trainer_waiter.hpp"

namespace tokenfeed {
namespace {

using detail::BatchSlot;
using Clock = std::chrono::steady_clock;
using Decrement = BatchProducer::Decrement;

// The longest a sleeping admitter takes to start a refill once woken, as seen on a busy
// virtual machine (perf/RESULTS_by_hand.md): a paced trainer's low mark leaves it that long.
constexpr double kRefillWakeUs = 1000;

// How long pop() spins before it sleeps on the futex, when the machine has a core for the
// trainer beside the decoders: about twice the time a run takes to decode (the decoders'
// mean so far), within these bounds, so that a run about to land is caught without a
// futex call on the decoder's side and a wake-up on the trainer's. Without such a core the
// trainer would take the decoders' time (and a sched_yield gives it to them only when the
// scheduler agrees), so it sleeps at once (and asks to be woken for several batches: see
// TrainerWaiter).
constexpr auto kMinSpin = std::chrono::microseconds(20);
constexpr auto kMaxSpin = std::chrono::microseconds(200);

// The most decoding (the depth's batches at the decoders' mean time per batch so far) a
// trainer that finds the ring empty takes on itself (see help_decode): how long a stop()
// from another thread may wait for it.
constexpr double kMaxHelpUs = 2000;

// Pops between two reads of the decoders' mean time per batch (see decode_us): the
// decoders write it on every batch, so reading it on every pop would cost the trainer a
// cache line taken from another core each time.
constexpr std::uint32_t kDecodeMeanEvery = 16;

// One step of a spin: tells the CPU this is a busy-wait (x86 pause), without a syscall.
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

std::size_t SplitPipeline::next_auto_depth(std::size_t current, std::size_t max, std::uint64_t waits, double step_us,
                                           double decode_us, std::size_t threads) noexcept {
  return AutoDepth::next(current, max, waits, step_us, decode_us, threads);
}

SplitPipeline::Depths SplitPipeline::plan_depths(std::int64_t configured, std::int64_t memory_mb,
                                                 std::size_t slot_bytes, std::size_t threads,
                                                 std::size_t held) noexcept {
  return AutoDepth::plan(configured, memory_mb, slot_bytes, threads, held);
}

// The trainer's side: pop(), its waits (spin, help, sleep), the admissions it owes the
// producer, and the pace it keeps. Every member but those marked otherwise belongs to the
// trainer's thread.
struct SplitPipeline::Impl {
  TrainerWaiter waiter;

  // Whether pop() spins before it sleeps: the process's CPU share (Options::trainer_may_spin)
  // and the hardware both have a thread for the trainer beside the decoders (see kMinSpin).
  const bool spin;

  // Whether spinning (or helping, see help_decode) pays here and now. A spin only helps
  // while a decoder runs on another core; when the process's threads do not fit its CPUs
  // (other ranks, a busy neighbour process, a quota), the decoder the trainer waits for is
  // itself waiting for a core, and the spin takes that core's time from it. Such spins
  // miss, so after kMissesToPause misses in a row the trainer sleeps at once for the next
  // `pause` waits (64, doubling at each new run of misses up to 4096, back to 64 after a
  // catch), then tries again.
  struct SpinRecord {
    static constexpr std::uint32_t kMissesToPause = 2;
    static constexpr std::uint32_t kMinPause = 64, kMaxPause = 4096;
    std::uint32_t misses = 0;  // in a row
    std::uint32_t pause = kMinPause;
    std::uint32_t skip_left = 0;  // waits left that sleep at once

    bool skip() noexcept {
      if (skip_left == 0) return false;
      --skip_left;
      return true;
    }
    void caught() noexcept {
      misses = 0;
      pause = kMinPause;
    }
    void missed() noexcept {
      if (++misses < kMissesToPause) return;
      misses = 0;
      skip_left = pause;
      pause = std::min(2 * pause, kMaxPause);
    }
  };
  SpinRecord spin_record;

  std::exception_ptr delivered_error;
  Decrement pending_admissions = 0;  // batches popped whose admission is not yet sent (sent in whole runs)

  // The trainer's pace (pop() measures it): while it is paced, the admitter looks on its own
  // after each send, at admitter_look(), and pop() hands it every whole run without a wake.
  // Its step is read by the admitter thread too.
  TrainerPace pace;

  // A pop with a deadline that returned nothing, so that a call made right after it (within
  // kResumeWithin of its return) continues it: the step ended at the first call (`called`)
  // and the wait began at the first call's wait (`wait_start`), however many calls the
  // trainer made in between (Python waits in slices to see Ctrl-C). A later call (a trainer
  // that did something else meanwhile, or came back after a KeyboardInterrupt) starts
  // afresh.
  struct UnfinishedPop {
    Clock::time_point called, wait_start, returned;
  };
  static constexpr Clock::duration kResumeWithin = std::chrono::milliseconds(10);
  std::optional<UnfinishedPop> unfinished_pop;

  // The decoders' mean time per batch as the trainer last read it (every kDecodeMeanEvery
  // pops and before every wait); the admitter thread reads it too.
  std::atomic<double> decode_us{0};
  std::uint32_t pops_to_decode_read = 0;

  // Last: its threads call admitter_look(), which reads the members above.
  BatchProducer producer;

  Impl(BatchSource& source, std::shared_ptr<detail::BatchPool> pool, const Options& options)
      : spin(options.trainer_may_spin && static_cast<std::size_t>(tbb::info::default_concurrency()) > options.threads),
        producer(source, std::move(pool), options, waiter, [this] { return admitter_look(); }) {}

  void read_decode_mean() noexcept {
    decode_us.store(producer.auto_depth().mean_decode_us(), std::memory_order_relaxed);
    pops_to_decode_read = kDecodeMeanEvery;
  }
  double mean_decode_us() const noexcept { return decode_us.load(std::memory_order_relaxed); }

  // The batches a sleeping trainer waits for (see TrainerWaiter): a quarter of the depth.
  // Before it sleeps, the trainer sends every admission it and the admitter hold
  // (take_pending), but less than a run: the decoders then hold all the others, so the ring
  // always reaches it.
  std::size_t batches_to_wake_for() const noexcept { return std::max<std::size_t>(1, producer.depth() / 4); }

  // Whether a help would be short (kMaxHelpUs): the depth's batches at the decoders' mean
  // time per batch so far.
  bool help_fits() const noexcept {
    const double batch_us = mean_decode_us();
    return batch_us > 0 && batch_us * static_cast<double>(producer.depth()) <= kMaxHelpUs;
  }

  // How long pop() spins before it sleeps, when it may (see kMinSpin and SpinRecord).
  Clock::duration spin_budget() const noexcept {
    const double run_us = 2.0 * static_cast<double>(producer.run()) * mean_decode_us() /
                          static_cast<double>(std::max<std::size_t>(producer.threads(), 1));
    const auto us = std::chrono::microseconds(static_cast<std::int64_t>(run_us));
    return std::clamp<Clock::duration>(us, kMinSpin, kMaxSpin);
  }

  // Takes the pending admissions (whole runs), with those the admitter still holds, for the
  // trainer to send itself: it is about to wait anyway and the decoders must start at once.
  Decrement take_pending() noexcept {
    const auto run = static_cast<Decrement>(producer.run());
    const Decrement runs = pending_admissions / run;
    pending_admissions -= runs * run;
    return runs + producer.reclaim();
  }

  // Whether the ring is down to its low mark: the admissions must go out now.
  bool ring_low() const noexcept { return producer.ready() <= low_mark(); }
  // The low mark: a quarter of the depth; for a paced trainer (see TrainerPace), if fewer,
  // the steps it takes while a refill's first run arrives (a wake-up, kRefillWakeUs at
  // worst, and the run's decoding), and one more. The lower the mark, the more batches one
  // refill makes, and each refill costs a wake-up. Any thread.
  std::size_t low_mark() const noexcept {
    const std::size_t quarter = producer.depth() / 4;
    const std::chrono::nanoseconds step = pace.step();  // read once: the trainer may move it
    if (step < TrainerPace::kMinStep) return quarter;
    const double step_us = std::chrono::duration<double, std::micro>(step).count();
    const double refill_us = kRefillWakeUs + static_cast<double>(producer.run()) * mean_decode_us();
    return std::min(quarter, static_cast<std::size_t>(std::ceil(refill_us / step_us)) + 1);
  }

  // Hands the pending admissions to the admitter thread: for when the ring still holds
  // batches (see Admitter). It is woken at once only when the ring is low; above that it is
  // woken later, once, by wake_admitter_if_low, and the trainer pays no syscall meanwhile.
  // Returns whether there was a whole run to hand off.
  bool hand_off_pending(bool low) noexcept {
    const auto run = static_cast<Decrement>(producer.run());
    const Decrement runs = pending_admissions / run;
    if (runs == 0) return false;
    producer.hand_off(static_cast<std::uint32_t>(runs), low);
    pending_admissions -= runs * run;
    return true;
  }

  // After a pop: one batch has left the prefetch window, so another may start. Admissions
  // are handed to the admitter thread in bulk, half the depth at a time: the trainer never
  // pays TBB's cost of waking a decoder, and pays a futex wake only when the ring runs low
  // (once per hand-off), with every whole run popped so far (at a slow step one wake of the
  // admitter and the decoders refills 3/4 of the depth). A paced trainer hands off every
  // whole run, which the admitter's own timed look collects before the ring runs low
  // (admitter_look): no wake at all. A trainer that finds the ring empty sends the pending
  // admissions and those the admitter holds itself (wait_for_batches), as it waits in any
  // case.
  void admit_after_pop() noexcept {
    ++pending_admissions;
    const bool low = ring_low();
    const std::size_t bulk = pace.paced() ? producer.run() : std::max<std::size_t>(1, producer.depth() / 2);
    if ((low || pending_admissions >= static_cast<Decrement>(bulk)) && hand_off_pending(low)) return;
    if (low && producer.admitter_holding()) producer.wake_admitter();
  }

  // The admitter's look after a send, while the trainer is paced: the time the trainer takes
  // to bring the batches ahead of it down to one above the ring's low mark (low_mark), less
  // TrainerPace's margin, so that the admitter sends what was handed off meanwhile before
  // the trainer would wake it. Ahead after a send: the depth less the admissions not yet
  // sent, under a run (pop() hands off every whole run); with TBB's workers decoding, the
  // ring is still filling when the admitter asks, so that bound counts, not the ring. On
  // the admitter thread.
  std::optional<std::chrono::nanoseconds> admitter_look() const noexcept {
    const std::size_t d = producer.depth();
    const std::size_t run = producer.run();
    const std::size_t coming = std::max(producer.ready(), d > run ? d - run : 0);
    const std::size_t low = low_mark() + 1;
    return pace.pause_for(coming > low ? coming - low : 0);
  }

  // On the trainer's thread, with the ring found empty: sends the admissions the decoders
  // may be idle for (a lone decoder's helping trainer puts them inside its help instead),
  // sets `start` (the wait's start as the caller measures it: after that send, before the
  // help), may help (help_decode), spins up to spin_budget() for a batch, then sleeps until
  // batches_to_wake_for() batches are ready (or the pipeline failed, so that its error is
  // delivered; or the deadline passed, when whatever is ready is taken). True when the ring
  // holds a batch; false at the deadline with none. Throws stopped_error() after stop().
  bool wait_for_batches(Clock::time_point& start, std::optional<Clock::time_point> deadline) {
    read_decode_mean();
    // Helping and spinning both take a core; they pay only while the trainer has one beside
    // the decoders (see spin and SpinRecord).
    const bool use_core = spin && !spin_record.skip();
    const bool may_help = use_core && !deadline && help_fits();
    // A trainer about to help a lone decoder puts the admissions itself, inside the arena
    // (help_decode); otherwise they go out now, from outside it.
    const bool trainer_puts = may_help && producer.lone_decoder();
    const Decrement admissions = take_pending();
    if (!trainer_puts) producer.send(admissions);
    start = Clock::now();
    // A help ends with the graph idle, every batch the decoders had in the ring: a batch
    // can only come from admissions the admitter thread was still sending, which a short
    // spin rarely catches, and a spin would count a second miss for this one wait. So after
    // a help the trainer sleeps at once.
    if (may_help) {
      help_decode(trainer_puts ? admissions : 0);
      if (producer.stopping()) throw producer.stopped_error();
      if (producer.ready() > 0) return true;
    } else if (use_core && spin_until_ready(start)) {
      return true;
    }
    return sleep_until_ready(deadline);
  }

  // Spins up to spin_budget() from `start` for a batch; records the catch or the miss.
  bool spin_until_ready(Clock::time_point start) {
    const Clock::duration spin_for = spin_budget();
    while (Clock::now() - start < spin_for) {
      if (producer.stopping()) throw producer.stopped_error();
      if (producer.ready() > 0) {
        spin_record.caught();
        return true;
      }
      for (int i = 0; i < 16; ++i) spin_pause();
    }
    spin_record.missed();
    return false;
  }

  // Sleeps until batches_to_wake_for() batches are ready (see wait_for_batches).
  bool sleep_until_ready(std::optional<Clock::time_point> deadline) {
    const std::size_t want = batches_to_wake_for();
    waiter.want(want);
    const auto done = [&](bool ready) {
      waiter.want(1);
      return ready;
    };
    while (true) {
      // `seen` before the looks at the ring (see TrainerWaiter) and the stop check: a
      // stop() after this load bumps the signal, so the sleep below returns.
      const std::uint32_t seen = waiter.seen();
      if (producer.stopping()) {
        done(false);
        throw producer.stopped_error();
      }
      const std::size_t ready = producer.ready();
      if (ready >= want || (ready > 0 && producer.failed())) return done(true);
      if (!deadline) {
        waiter.sleep(seen);
      } else if (Clock::now() >= *deadline) {
        return done(ready > 0);
      } else {
        waiter.sleep_until(seen, *deadline);
      }
    }
  }

  // On the trainer's thread, with the ring found empty and no deadline: runs the graph's
  // tasks (plans, decodes, the collator's pushes) beside the decoders until every admitted
  // batch is in the ring (BatchProducer::help). The trainer would only wait otherwise; this
  // way a trainer that outpaces its decoders (or whose decoders wait for a CPU the process
  // does not have) produces instead of sleeping, and pays no wake-up. Only while that work
  // is short (kMaxHelpUs): a stop() from another thread, or a batch that lands meanwhile,
  // waits for it; and a deadline could not be kept, so a pop() with one never helps. A help
  // that decoded nothing (the decoders had every task, and the trainer only waited inside
  // TBB) counts as a missed spin. REQUIRES: help_fits().
  void help_decode(Decrement admissions) {
    if (producer.help(admissions)) {
      spin_record.caught();
    } else {
      spin_record.missed();
    }
  }

  // After a pop that took `slot`: the bookkeeping of the trainer's step and of auto depth.
  // `step_end`: when the trainer's step ended (the call, or the first call of a continued
  // wait).
  void took(Clock::time_point step_end, double waited_us) noexcept {
    const std::optional<std::chrono::nanoseconds> step = pace.popped(step_end);
    if (producer.auto_depth_on()) producer.auto_depth().observe_pop(step, waited_us);
    if (pops_to_decode_read == 0) {
      read_decode_mean();
    } else {
      --pops_to_decode_read;
    }
  }
};

SplitPipeline::SplitPipeline(BatchSource& source, std::shared_ptr<detail::BatchPool> pool, Options options)
    : impl_(std::make_unique<Impl>(source, std::move(pool), options)) {}

SplitPipeline::~SplitPipeline() { stop(); }  // the producer then joins its threads and waits for the graph

void SplitPipeline::stop() noexcept {
  impl_->producer.stop();
  impl_->waiter.interrupt();
}

std::size_t SplitPipeline::prefetch_depth() const noexcept { return impl_->producer.depth(); }

std::uint64_t SplitPipeline::admitter_wakes() const noexcept { return impl_->producer.admitter_wakes(); }

BatchSlot* SplitPipeline::pop(double& waited_us, std::optional<std::chrono::steady_clock::time_point> deadline) {
  Impl& s = *impl_;
  waited_us = 0;
  if (s.delivered_error) std::rethrow_exception(s.delivered_error);

  // After stop() nothing is handed out, not even batches already in the ring: stop() may
  // have cut their decoding short.
  if (s.producer.stopping()) throw s.producer.stopped_error();
  const auto called = Clock::now();
  if (s.unfinished_pop && called - s.unfinished_pop->returned > Impl::kResumeWithin) s.unfinished_pop.reset();
  BatchSlot* slot = nullptr;
  std::optional<Clock::time_point> wait_start;
  if (s.unfinished_pop) wait_start = s.unfinished_pop->wait_start;
  if (!s.producer.pop(slot)) {
    Clock::time_point start;  // set by wait_for_batches, once it has sent the admissions
    if (!s.wait_for_batches(start, deadline)) {
      // Nothing taken: a call right after this one continues it (see unfinished_pop).
      if (!s.unfinished_pop) s.unfinished_pop = Impl::UnfinishedPop{called, start, {}};
      s.unfinished_pop->returned = Clock::now();
      return nullptr;
    }
    s.producer.pop(slot);  // holds at least one: only this thread pops
    if (!wait_start) wait_start = start;
  }
  // A pop that found a batch ready returns within a microsecond: its call stands for its
  // return, and the clock is read once.
  Clock::time_point returned = called;
  if (wait_start) {
    returned = Clock::now();
    waited_us = std::chrono::duration<double, std::micro>(returned - *wait_start).count();
  }
  const Clock::time_point step_end = s.unfinished_pop ? s.unfinished_pop->called : called;
  s.unfinished_pop.reset();
  slot->observe();
  s.admit_after_pop();
  if (slot->error) {
    s.delivered_error = slot->error;
    s.producer.release(slot);
    std::rethrow_exception(s.delivered_error);
  }
  s.took(step_end, waited_us);
  s.pace.returned(returned);
  s.producer.prefetch_next();
  return slot;
}

}  // namespace tokenfeed
