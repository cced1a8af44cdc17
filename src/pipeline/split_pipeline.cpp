#include "pipeline/split_pipeline.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/lockfree/spsc_queue.hpp>
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include "io/mapped_file.hpp"
#include "pipeline/admitter.hpp"
#include "pipeline/auto_depth.hpp"
#include "pipeline/node_body.hpp"
#include "pipeline/read_ahead.hpp"
#include "pipeline/trainer_pace.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed {
namespace {

namespace flow = tbb::flow;
using detail::BatchSlot;
using Clock = std::chrono::steady_clock;
using SlotMessage = HandOff<BatchSlot>;  // a decoded run's first slot, between the nodes

// The longest a sleeping admitter takes to start a refill once woken, as seen on a busy
// virtual machine (perf/RESULTS_by_hand.md): a paced trainer's low mark leaves it that long.
constexpr double kRefillWakeUs = 1000;

// How long pop() spins before it sleeps on the futex, when the machine has a core for the
// trainer beside the decoders: about twice the time a run takes to decode (the decoders'
// mean so far), within these bounds, so that a run about to land is caught without a
// futex call on the decoder's side and a wake-up on the trainer's. Without such a core the
// trainer would take the decoders' time (and a sched_yield gives it to them only when the
// scheduler agrees), so it sleeps at once (and asks to be woken for several batches: see
// wake_at).
constexpr auto kMinSpin = std::chrono::microseconds(20);
constexpr auto kMaxSpin = std::chrono::microseconds(200);

// The most decoding (the depth's batches at the decoders' mean time per batch so far) a
// trainer that finds the ring empty takes on itself (see help_decode): how long a stop()
// from another thread may wait for it.
constexpr double kMaxHelpUs = 2000;

// One step of a spin: tells the CPU this is a busy-wait (x86 pause), without a syscall.
inline void spin_pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Set on the trainer's thread while it runs the graph's tasks itself (help_decode).
thread_local bool t_helping = false;
struct HelpingScope {
  HelpingScope() noexcept { t_helping = true; }
  ~HelpingScope() { t_helping = false; }
  HelpingScope(const HelpingScope&) = delete;
  HelpingScope& operator=(const HelpingScope&) = delete;
};

// The limiter's decrement carries a count: +n admits n more batches, and one negative
// decrement at start reserves the headroom that auto depth hands out later.
using Decrement = long long;

// TBB lets a process have hardware threads - 1 workers by default. More decode threads
// than that (decode_threads = 2 on a 2-core machine: the trainer's core is idle while it
// waits, so pure production can use it) need the limit raised while the pipeline runs;
// otherwise the arena silently gets fewer workers than asked for.
std::unique_ptr<tbb::global_control> worker_limit_for(std::size_t threads) {
  const auto allowed = static_cast<std::size_t>(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
  if (threads + 1 <= allowed && threads + 1 <= static_cast<std::size_t>(tbb::info::default_concurrency())) return nullptr;
  return std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, threads + 1);
}

// A first-in first-out queue of plans with a capacity fixed at construction, so that the
// steady state allocates nothing (std::deque allocates a block every few batches).
// Overflow and underflow are bugs in the bounds argued where the queues are used: they end
// the process rather than lose or invent a step the sequencer would wait for forever.
// Not thread-safe.
template <typename Item>
class FixedQueue {
 public:
  explicit FixedQueue(std::size_t capacity) : items_(capacity) {}
  std::size_t size() const noexcept { return count_; }
  void push_back(Item item) {
    if (count_ == items_.size()) std::terminate();
    items_[(head_ + count_) % items_.size()] = std::move(item);
    ++count_;
  }
  Item pop_front() {
    if (count_ == 0) std::terminate();
    Item item = std::move(items_[head_]);
    head_ = (head_ + 1) % items_.size();
    --count_;
    return item;
  }

 private:
  std::vector<Item> items_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};
using PlanQueue = FixedQueue<BatchPlan>;

// A plan on its way to the decode stage, and whether it is the last of its run.
struct RunPlan {
  BatchPlan plan;
  bool ends_run = false;
};

// Batches per run (see SplitPipeline::Impl::run): 4 at the depths auto starts from and
// above, fewer for a shallow fixed depth, whose few batches would otherwise travel in one
// or two runs and leave the decoders idle while the trainer drains them.
constexpr std::size_t kMaxRun = 4;
std::size_t run_length_for(std::size_t depth) noexcept {
  if (depth >= 16 && depth % kMaxRun == 0) return kMaxRun;
  if (depth >= 8 && depth % 2 == 0) return 2;
  return 1;
}

}  // namespace

std::size_t SplitPipeline::next_auto_depth(std::size_t current, std::size_t max, std::uint64_t waits,
                                           double step_us, double decode_us, std::size_t threads) noexcept {
  return AutoDepth::next(current, max, waits, step_us, decode_us, threads);
}

SplitPipeline::Depths SplitPipeline::plan_depths(std::int64_t configured, std::int64_t memory_mb,
                                                 std::size_t slot_bytes, std::size_t threads,
                                                 std::size_t held) noexcept {
  return AutoDepth::plan(configured, memory_mb, slot_bytes, threads, held);
}

struct SplitPipeline::Impl {
  BatchSource& source;
  std::shared_ptr<detail::BatchPool> pool;
  Options options;
  const bool auto_depth;
  // Batches travel through the graph in runs of `run` consecutive steps: one message, one
  // decode task, one pass through the sequencer and the collator per run, so that the
  // graph's cost per message (its scheduling, and with several decoders their hand-offs)
  // is paid once a run, not once a batch. The limiter counts runs; the ring and the
  // trainer see batches. Depths are whole runs.
  const std::size_t run;
  const std::size_t max_depth;

  boost::lockfree::spsc_queue<BatchSlot*> ring;

  // Plans travel from the sampler to the decode stage through this queue, a run at a
  // time, not inside the graph's messages (which are empty tokens): TBB copies messages
  // into tasks inside libtbb, where TSan cannot see the ordering, so our data never rides
  // in them. Which decode task takes which run does not matter: the sequencer restores
  // step order. Bounded: at most max_depth plans are in flight, plus one run the sampler
  // made while the limiter was full.
  Mutex plans_mutex;
  FixedQueue<RunPlan> plans TF_GUARDED_BY(plans_mutex);
  std::atomic<std::uint64_t> next_step;
  std::atomic<bool> stopping{false};
  std::atomic<bool> failed{false};  // a stage failed: produce nothing more
  // Bumped after every push into the ring and on stop; pop() sleeps on it.
  std::atomic<std::uint32_t> signal{0};
  // How many batches the ring must hold before the collator wakes a sleeping trainer (1
  // while it does not sleep). A trainer that must sleep (it found the ring empty and had no
  // core to spin on, or spun in vain) asks for a few batches at once, not one: a wake-up
  // costs a futex call on the decoder's side and, on a machine whose cores all decode, a
  // context switch that interrupts a decoder, so one wake per batch would cost production
  // far more than the trainer saves by starting a batch earlier. The trainer then takes
  // those batches without waiting.
  // No lost wake-up: the trainer stores wake_at, then loads signal (its `seen`), then looks
  // at the ring; the collator pushes, bumps signal, then loads wake_at, all seq_cst. Either
  // the trainer's load of signal follows the bump, and then it sees the push; or the bump
  // follows it, and then the collator sees wake_at and wakes the trainer, whose wait on
  // `seen` cannot miss a bump after it.
  std::atomic<std::size_t> wake_at{1};
  BodyOrder body_order;  // every node body runs inside a BodyOrder::Scope
  // A pop() with a deadline sleeps on timed_cv instead, since an atomic wait has no
  // timeout. wake_trainer() takes timed_mutex only while timed_waiters is not 0: the
  // seq_cst bump of signal and load of timed_waiters, against the waiter's seq_cst
  // increment and load of signal, make sure one side sees the other (no lost wake-up).
  std::mutex timed_mutex;
  std::condition_variable timed_cv;
  std::atomic<std::uint32_t> timed_waiters{0};

  void wake_trainer() noexcept {
    signal.fetch_add(1, std::memory_order_seq_cst);
    notify_trainer();
  }
  // Wakes a sleeping pop() (whose signal has moved).
  void notify_trainer() noexcept {
    signal.notify_all();
    if (timed_waiters.load(std::memory_order_seq_cst) != 0) {
      const std::lock_guard lock(timed_mutex);
      timed_cv.notify_all();
    }
  }

  // Sleeps until signal moves past `seen` or `deadline` passes.
  void wait_until(std::uint32_t seen, Clock::time_point deadline) {
    timed_waiters.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock lock(timed_mutex);
      timed_cv.wait_until(lock, deadline, [&] { return signal.load(std::memory_order_seq_cst) != seen; });
    }
    timed_waiters.fetch_sub(1, std::memory_order_release);
  }

  // The batches a sleeping trainer waits for (see wake_at): a quarter of the depth. Before
  // it sleeps, the trainer sends every admission it and the admitter hold (take_pending),
  // but less than a run: the decoders then hold all the others, so the ring always reaches
  // it.
  std::size_t batches_to_wake_for() const noexcept {
    return std::max<std::size_t>(1, depth.load(std::memory_order_relaxed) / 4);
  }

  // On the trainer's thread, with the ring found empty: sends the admissions the decoders
  // may be idle for (a lone decoder's helping trainer puts them inside its help instead),
  // sets `start` (the wait's start as the caller measures it: after that send, before the
  // help), may help (help_decode), spins up to spin_budget() for a batch, then
  // sleeps until batches_to_wake_for() batches are ready (or the pipeline failed, so that
  // its error is delivered; or the deadline passed, when whatever is ready is taken). True
  // when the ring holds a batch; false at the deadline with none. Throws stopped_error()
  // after stop().
  bool wait_for_batches(Clock::time_point& start, std::optional<Clock::time_point> deadline) {
    // Helping and spinning both take a core; they pay only while the trainer has one beside
    // the decoders (see spin and SpinRecord).
    const bool use_core = spin && !spin_record.skip();
    const bool may_help = use_core && !deadline && help_fits();
    // A trainer about to help a lone decoder puts the admissions itself, inside the arena
    // (help_decode); otherwise they go out now, from outside it.
    const bool trainer_puts = may_help && lone_decoder;
    const Decrement admissions = take_pending();
    if (!trainer_puts) send_admissions(admissions);
    start = Clock::now();
    // A help ends with the graph idle, every batch the decoders had in the ring: a batch
    // can only come from admissions the admitter thread was still sending, which a short
    // spin rarely catches, and a spin would count a second miss for this one wait. So after
    // a help the trainer sleeps at once.
    if (may_help) {
      help_decode(trainer_puts ? admissions : 0);
      if (stopping.load(std::memory_order_acquire)) throw stopped_error();
      if (ring.read_available() > 0) return true;
    }
    const Clock::duration spin_for = use_core && !may_help ? spin_budget() : Clock::duration::zero();
    if (spin_for > Clock::duration::zero()) {
      while (Clock::now() - start < spin_for) {
        if (stopping.load(std::memory_order_acquire)) throw stopped_error();
        if (ring.read_available() > 0) {
          spin_record.caught();
          return true;
        }
        for (int i = 0; i < 16; ++i) spin_pause();
      }
      spin_record.missed();
    }
    const std::size_t want = batches_to_wake_for();
    wake_at.store(want, std::memory_order_seq_cst);
    const auto done = [&](bool ready) {
      wake_at.store(1, std::memory_order_seq_cst);
      return ready;
    };
    while (true) {
      // `seen` before the looks at the ring (see wake_at) and the stop check: a stop()
      // after this load bumps the signal, so the wait below returns.
      const std::uint32_t seen = signal.load(std::memory_order_seq_cst);
      if (stopping.load(std::memory_order_acquire)) {
        done(false);
        throw stopped_error();
      }
      const std::size_t ready = ring.read_available();
      if (ready >= want || (ready > 0 && failed.load(std::memory_order_acquire))) return done(true);
      if (!deadline) {
        signal.wait(seen, std::memory_order_acquire);
      } else if (Clock::now() >= *deadline) {
        return done(ready > 0);
      } else {
        wait_until(seen, *deadline);
      }
    }
  }

  // On the trainer's thread, with the ring found empty and no deadline: joins the arena and
  // runs the graph's tasks (plans, decodes, the collator's pushes) beside the decoders until
  // the graph is idle, that is until every admitted batch is in the ring. The trainer would
  // only wait otherwise; this way a trainer that outpaces its decoders (or whose decoders
  // wait for a CPU the process does not have) produces instead of sleeping, and pays no
  // wake-up. Only while that work is short (kMaxHelpUs): a stop() from another thread, or a
  // batch that lands meanwhile, waits for it; and a deadline could not be kept, so a pop()
  // with one never helps. A help that decoded nothing (the decoders had every task, and the
  // trainer only waited inside TBB) counts as a missed spin. `admissions`: those a lone
  // decoder's trainer puts itself (see wait_for_batches). REQUIRES: help_fits().
  void help_decode(Decrement admissions) {
    const std::uint64_t before = helped_runs;
    {
      const HelpingScope helping;
      if (lone_decoder) {
        // Put from inside the arena, the tasks start in this thread's own pool: the trainer
        // decodes at once, and the admitter thread, joined, takes what it can beside it.
        // Put from outside, they would wait for whichever thread came first, and a trainer
        // slower to get there than the admitter would only wait.
        arena.execute([&] {
          if (admissions != 0) {
            limiter->decrementer().try_put(admissions);
            admitter->join();
          }
          graph->wait_for_all();
        });
      } else {
        graph->wait_for_all();
      }
    }
    if (helped_runs > before) {
      spin_record.caught();
    } else {
      spin_record.missed();
    }
  }
  // Whether a help would be short (kMaxHelpUs): the depth's batches at the decoders' mean
  // time per batch so far.
  bool help_fits() const noexcept {
    const double batch_us = auto_controller.mean_decode_us();
    const auto batches = static_cast<double>(depth.load(std::memory_order_relaxed));
    return batch_us > 0 && batch_us * batches <= kMaxHelpUs;
  }
  // Runs the trainer decoded while helping (trainer's thread only: see t_helping).
  std::uint64_t helped_runs = 0;

  // Sampler-only state (the input_node body is never called concurrently).
  PlanQueue ahead;  // planned, not yet admitted
  bool planning_failed = false;

  ReadAhead read_ahead;

  // The depth in effect (set by the collator), and what auto depth asks for (pop()).
  std::atomic<std::size_t> depth;
  AutoDepth auto_controller;

  // Whether pop() spins before it sleeps: the process's CPU share (Options::trainer_may_spin)
  // and the hardware both have a thread for the trainer beside the decoders (see kMinSpin).
  const bool spin;

  // Whether spinning (or helping, see help_decode) pays here and now. A spin only helps
  // while a decoder runs on another core; when the process's threads do not fit its CPUs
  // (other ranks, a busy neighbour process, a quota), the decoder the trainer waits for is
  // itself waiting for a core, and the spin takes that core's time from it. Such spins
  // miss, so after kMissesToPause misses in a row the trainer sleeps at once for the next
  // `pause` waits (64, doubling at each new run of misses up to 4096, back to 64 after a
  // catch), then tries again. Trainer's thread only.
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

  // How long pop() spins before it sleeps, when it may (see kMinSpin and SpinRecord).
  Clock::duration spin_budget() const noexcept {
    const double run_us = 2.0 * static_cast<double>(run) * auto_controller.mean_decode_us() /
                          static_cast<double>(std::max<std::size_t>(options.threads, 1));
    const auto us = std::chrono::microseconds(static_cast<std::int64_t>(run_us));
    return std::clamp<Clock::duration>(us, kMinSpin, kMaxSpin);
  }

  // Consumer-side state (only touched by the thread calling pop()).
  std::exception_ptr delivered_error;
  Decrement pending_admissions = 0;  // batches popped whose admission is not yet sent (sent in whole runs)

  // Takes the pending admissions (whole runs), with those the admitter still holds, for the
  // trainer to send itself: it is about to wait anyway and the decoders must start at once.
  Decrement take_pending() {
    const Decrement runs = pending_admissions / static_cast<Decrement>(run);
    pending_admissions -= runs * static_cast<Decrement>(run);
    return runs + static_cast<Decrement>(admitter->reclaim());
  }

  // Sends `n` admissions from the trainer's thread, outside the arena.
  void send_admissions(Decrement n) {
    if (n == 0) return;
    limiter->decrementer().try_put(n);
    // Put from outside the arena, the tasks wait there for a thread of it: a lone
    // decoder's arena has no worker, so the admitter thread runs them.
    if (lone_decoder) admitter->join();
  }

  // Whether the ring is down to its low mark: the admissions must go out now.
  bool ring_low() const noexcept { return ring.read_available() <= low_mark(); }
  // The low mark: a quarter of the depth; for a paced trainer (see TrainerPace), if fewer,
  // the steps it takes while a refill's first run arrives (a wake-up, kRefillWakeUs at
  // worst, and the run's decoding), and one more. The lower the mark, the more batches one
  // refill makes, and each refill costs a wake-up.
  std::size_t low_mark() const noexcept {
    const std::size_t quarter = depth.load(std::memory_order_relaxed) / 4;
    const std::chrono::nanoseconds step = pace.step();  // read once: the trainer may move it
    if (step < TrainerPace::kMinStep) return quarter;
    const double step_us = std::chrono::duration<double, std::micro>(step).count();
    const double refill_us = kRefillWakeUs + static_cast<double>(run) * auto_controller.mean_decode_us();
    return std::min(quarter, static_cast<std::size_t>(std::ceil(refill_us / step_us)) + 1);
  }

  // Hands the pending admissions to the admitter thread: for when the ring still holds
  // batches (see Admitter). It is woken at once only when the ring is low; above that it is
  // woken later, once, by wake_admitter_if_low, and the trainer pays no syscall meanwhile.
  // Returns whether there was a whole run to hand off.
  bool hand_off_pending() {
    const Decrement runs = pending_admissions / static_cast<Decrement>(run);
    if (runs == 0) return false;
    admitter->hand_off(static_cast<std::uint32_t>(runs), ring_low());
    pending_admissions -= runs * static_cast<Decrement>(run);
    return true;
  }

  // After a pop: wakes the admitter when it holds admissions and the ring has run low, so
  // that the decoders refill it before it empties.
  void wake_admitter_if_low() noexcept {
    if (admitter->holding() && ring_low()) admitter->wake();
  }

  // The trainer's pace (pop() measures it): while it is paced, the admitter looks on its own
  // after each send, at admitter_look(), and pop() hands it every whole run without a wake.
  TrainerPace pace;

  // The trainer's thread's: a pop with a deadline that returned nothing, so that a call
  // made right after it (within kResumeWithin of its return) continues it: the step ended
  // at the first call (`called`) and the wait began at the first call's wait
  // (`wait_start`), however many calls the trainer made in between (Python waits in slices
  // to see Ctrl-C). A later call (a trainer that did something else meanwhile, or came
  // back after a KeyboardInterrupt) starts afresh.
  struct UnfinishedPop {
    Clock::time_point called, wait_start, returned;
  };
  static constexpr Clock::duration kResumeWithin = std::chrono::milliseconds(10);
  std::optional<UnfinishedPop> unfinished_pop;

  // The admitter's look after a send, while the trainer is paced: the time the trainer takes
  // to bring the batches ahead of it down to one above the ring's low mark (low_mark), less
  // TrainerPace's margin, so that the admitter sends what was handed off meanwhile before
  // the trainer would wake it. Ahead after a send: the depth less the admissions not yet
  // sent, under a run (pop() hands off every whole run); with TBB's workers decoding, the
  // ring is still filling when the admitter asks, so that bound counts, not the ring. On
  // the admitter thread.
  std::optional<std::chrono::nanoseconds> admitter_look() const noexcept {
    const std::size_t d = depth.load(std::memory_order_relaxed);
    const std::size_t coming = std::max(ring.read_available(), d > run ? d - run : 0);
    const std::size_t low = low_mark() + 1;
    return pace.pause_for(coming > low ? coming - low : 0);
  }

  std::unique_ptr<Admitter> admitter;  // started after build(); reset by the destructor first

  // One decode thread: the admitter thread is that decoder, not a TBB worker (see
  // send_and_run). A TBB worker that runs out of tasks spins (sched_yield) for a while
  // before it sleeps, after every burst of work: beside a slow trainer, a burst every
  // three quarters of the depth, and that spin was a sixth of the loader's CPU. The
  // admitter thread sleeps on its futex as soon as the graph is idle. With more decode
  // threads, TBB's workers decode and the admitter only admits.
  const bool lone_decoder;
  bool activated = false;  // lone decoder: whether the sampler runs yet (admitter thread only)

  // The admitter's send for a lone decoder: on the admitter thread, joins the arena, admits
  // `n` more batches and runs the graph's tasks until every admitted batch is ready (the
  // trainer may run some beside it, see help_decode). The sampler starts on the first call,
  // so that its first task is spawned here, not on the thread that built the graph.
  void send_and_run(long long n) {
    arena.execute([&] {
      if (!activated) {
        activated = true;
        sampler->activate();
      }
      if (n != 0) limiter->decrementer().try_put(static_cast<Decrement>(n));
      graph->wait_for_all();
    });
  }

  std::unique_ptr<tbb::global_control> worker_limit;  // see worker_limit_for; outlives the arena's use
  tbb::task_arena arena;
  // Several threads may wait on the graph at once (the admitter of a lone decoder and the
  // trainer helping it): a concurrent_wait context is not reset when one of them returns
  // while the other still runs the graph's tasks.
  tbb::task_group_context graph_context{
      tbb::task_group_context::isolated,
      tbb::task_group_context::default_traits | tbb::task_group_context::concurrent_wait};
  std::unique_ptr<flow::graph> graph;
  std::unique_ptr<flow::input_node<flow::continue_msg>> sampler;
  std::unique_ptr<flow::limiter_node<flow::continue_msg, Decrement>> limiter;
  std::unique_ptr<flow::function_node<flow::continue_msg, SlotMessage>> decode;
  std::unique_ptr<flow::sequencer_node<SlotMessage>> sequencer;
  std::unique_ptr<flow::function_node<SlotMessage, flow::continue_msg>> collator;

  Impl(BatchSource& s, std::shared_ptr<detail::BatchPool> p, Options o)
      : source(s),
        pool(std::move(p)),
        options(o),
        auto_depth(o.max_prefetch_depth > o.prefetch_depth),
        run(run_length_for(o.prefetch_depth)),
        max_depth(std::max(o.prefetch_depth, o.max_prefetch_depth) / run * run),
        ring(std::max(pool->capacity(), pool->size())),
        plans(max_depth + run),
        next_step(o.start_step),
        ahead(ReadAhead::kBatches + 1),
        depth(o.prefetch_depth),
        auto_controller(o.prefetch_depth, max_depth, o.threads),
        spin(o.trainer_may_spin && static_cast<std::size_t>(tbb::info::default_concurrency()) > o.threads),
        lone_decoder(o.threads == 1),
        worker_limit(worker_limit_for(o.threads)),
        // One slot is reserved for the thread that builds and tears down the graph, so that
        // it always joins the arena itself: with every worker slot taken, execute() would
        // hand its functor to a worker instead (a hand-off TSan cannot see into). A lone
        // decoder's arena has no worker slot at all: its three slots are reserved for the
        // threads that run its tasks, the admitter and the trainer, and for that one.
        arena(lone_decoder ? 3 : static_cast<int>(o.threads) + 1, lone_decoder ? 3 : 1) {}

  Error stopped_error() const {
    return Error(ErrorKind::usage, "get_batch on split '" + pool->split() + "' after the loader was stopped");
  }

  // Moves a run's plans (n of them) into the queue at once.
  void push_run(BatchPlan* run_plans, std::size_t n) {
    MutexLock lock(plans_mutex);
    for (std::size_t i = 0; i < n; ++i)
      plans.push_back(RunPlan{std::move(run_plans[i]), i + 1 == n});  // the limiter bounds it
  }

  // Moves the next run's plans into `out`; returns how many there are.
  std::size_t pop_run(std::array<BatchPlan, kMaxRun>& out) {
    MutexLock lock(plans_mutex);
    for (std::size_t n = 0;;) {  // every token is preceded by its run
      RunPlan p = plans.pop_front();
      out[n++] = std::move(p.plan);
      if (p.ends_run) return n;
    }
  }

  // Plans the next batch (and, for read-ahead, a few beyond it), in step order.
  void plan_ahead(std::size_t wanted) {
    while (!planning_failed && ahead.size() < wanted) {
      const std::uint64_t step = next_step.fetch_add(1, std::memory_order_relaxed);
      BatchPlan plan;
      try {
        plan = source.plan(step);
      } catch (...) {
        planning_failed = true;
        plan = BatchPlan{};
        plan.step = step;
        plan.error = std::current_exception();
      }
      if (!plan.error && read_ahead.on()) source.will_need(plan);
      ahead.push_back(std::move(plan));
    }
  }

  flow::continue_msg plan_next(tbb::flow_control& fc) {
    const BodyOrder::Scope scope(body_order);
    if (stopping.load(std::memory_order_acquire) || failed.load(std::memory_order_acquire)) {
      fc.stop();
      return {};
    }
    // A run of `run` plans, cut after a failed one (it goes out, then production stops).
    std::array<BatchPlan, kMaxRun> made;
    std::size_t n = 0;
    while (n < run) {
      plan_ahead(read_ahead.on() ? ReadAhead::kBatches + 1 : 1);
      made[n] = ahead.pop_front();
      if (made[n++].error) {
        failed.store(true, std::memory_order_release);
        break;
      }
    }
    push_run(made.data(), n);
    return {};
  }

  // Decodes the next run into slots linked by run_next; returns the first, whose sequence
  // is the run's place in the stream.
  BatchSlot* decode_run() {
    const BodyOrder::Scope scope(body_order);
    if (t_helping) ++helped_runs;
    std::array<BatchPlan, kMaxRun> run_plans;
    const std::size_t n = pop_run(run_plans);
    const int decoder = tbb::this_task_arena::current_thread_index();
    BatchSlot* first = nullptr;
    BatchSlot* last = nullptr;
    for (std::size_t i = 0; i < n; ++i) {
      BatchSlot* slot = decode_one(run_plans[i], decoder);
      if (first == nullptr) {
        first = slot;
      } else {
        last->run_next = slot;
      }
      last = slot;
    }
    first->sequence = (run_plans[0].step - options.start_step) / run;
    first->publish();
    return first;
  }

  BatchSlot* decode_one(const BatchPlan& plan, int decoder) {
    BatchSlot* slot = pool->acquire(decoder);
    if (slot == nullptr) {
      // Cannot happen while the limiter and the held-batch cap hold; if it does, fail
      // loudly rather than lose a step (the sequencer would wait for it forever).
      std::terminate();
    }
    slot->observe();
    slot->run_next = nullptr;
    slot->step = plan.step;
    slot->error = plan.error;
    if (!slot->error && stopping.load(std::memory_order_acquire)) {
      // Not decoded: such a slot must never reach the trainer as a batch (pop() also
      // refuses to hand anything out after stop()).
      slot->error = std::make_exception_ptr(stopped_error());
    }
    if (!slot->error) {
      const auto start = Clock::now();
      try {
        source.decode(plan, *slot);
        if (MappedFile::any_damaged()) source.check_intact();
      } catch (...) {
        failed.store(true, std::memory_order_release);
        slot->error = std::current_exception();
      }
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
      auto_controller.record_decode(static_cast<std::uint64_t>(ns));
      read_ahead.watch_faults();
    }
    slot->publish();
    return slot;
  }

  // Applies a depth pop() asked for, one run's slots per call (each collate calls it): slots
  // first, then their admissions. Allocating a larger step at once (zero-filled buffers:
  // 30 MiB for 48 slots of 4x8192) would keep this serial stage from pushing batches for
  // milliseconds, long enough to empty the ring of a trainer whose waits asked for depth.
  void apply_growth() {
    const std::size_t want = std::min(auto_controller.requested(), max_depth) / run * run;
    const std::size_t have = depth.load(std::memory_order_relaxed);
    if (want <= have || stopping.load(std::memory_order_acquire)) return;
    const std::size_t next = std::min(want, have + run);
    pool->grow_to(pool->size() + (next - have));
    depth.store(next, std::memory_order_release);
    limiter->decrementer().try_put(static_cast<Decrement>((next - have) / run));
    if (next == want) {
      log_line(LogLevel::info, "[tokenfeed] split=" + pool->split() + " prefetch_depth=" + std::to_string(want) +
                                   " (auto, max " + std::to_string(max_depth) + "; " + auto_controller.note() + ")");
    }
  }

  void collate(BatchSlot* first) {
    const BodyOrder::Scope scope(body_order);
    first->observe();
    bool failure = false;
    for (BatchSlot* slot = first; slot != nullptr;) {
      BatchSlot* next = slot->run_next;  // read before the push: the trainer may take the slot at once
      failure |= slot->error != nullptr;
      // Never fails: at most pool->capacity() slots exist and the ring holds that many.
      const bool pushed = ring.push(slot);
      (void)pushed;
      slot = next;
    }
    signal.fetch_add(1, std::memory_order_seq_cst);
    if (failure || ring.read_available() >= wake_at.load(std::memory_order_seq_cst)) notify_trainer();
    if (auto_depth) apply_growth();
  }

  std::size_t sequence_of(BatchSlot* slot) {
    const BodyOrder::Scope scope(body_order);
    slot->observe();
    return static_cast<std::size_t>(slot->sequence);
  }

  // The node bodies' entry points, in the shapes TBB calls them with.
  SlotMessage decode_body(const flow::continue_msg&) { return SlotMessage(decode_run()); }
  std::size_t sequence_body(const SlotMessage& slot) { return sequence_of(slot.get()); }
  flow::continue_msg collate_body(const SlotMessage& slot) {
    collate(slot.get());
    return {};
  }

  // Cancels the graph's queued work and waits for the bodies running. REQUIRES: stopping.
  void tear_down() {
    arena.execute([this] {
      graph->cancel();
      graph->wait_for_all();
    });
    body_order.after_teardown();
  }

  void build() {
    graph = std::make_unique<flow::graph>(graph_context);
    sampler = std::make_unique<flow::input_node<flow::continue_msg>>(*graph, NodeBody<Impl, &Impl::plan_next>(*this));
    limiter = std::make_unique<flow::limiter_node<flow::continue_msg, Decrement>>(*graph, max_depth / run);
    // One decoder more than the workers: the trainer's thread, while it helps (help_decode).
    decode = std::make_unique<flow::function_node<flow::continue_msg, SlotMessage>>(
        *graph, options.threads + 1, NodeBody<Impl, &Impl::decode_body>(*this));
    sequencer =
        std::make_unique<flow::sequencer_node<SlotMessage>>(*graph, NodeBody<Impl, &Impl::sequence_body>(*this));
    collator = std::make_unique<flow::function_node<SlotMessage, flow::continue_msg>>(
        *graph, flow::serial, NodeBody<Impl, &Impl::collate_body>(*this));
    flow::make_edge(*sampler, *limiter);
    flow::make_edge(*limiter, *decode);
    flow::make_edge(*decode, *sequencer);
    flow::make_edge(*sequencer, *collator);
    // The headroom above the starting depth stays reserved until auto depth hands it out.
    const std::size_t reserved = (max_depth - options.prefetch_depth) / run;
    if (reserved > 0) limiter->decrementer().try_put(-static_cast<Decrement>(reserved));
    body_order.graph_built();
    if (!lone_decoder) sampler->activate();  // else on the admitter thread: send_and_run
  }
};

SplitPipeline::SplitPipeline(BatchSource& source, std::shared_ptr<detail::BatchPool> pool, Options options)
    : impl_(std::make_unique<Impl>(source, std::move(pool), options)) {
  if (impl_->auto_depth) {
    log_line(LogLevel::debug, "[tokenfeed] split=" + impl_->pool->split() +
                                  " prefetch_depth=" + std::to_string(options.prefetch_depth) + " (auto start, max " +
                                  std::to_string(impl_->max_depth) + ")");
  }
  impl_->arena.execute([this] {
    impl_->build();
    // Edges made in build() spawn the buffer nodes' forwarding tasks on this thread. With
    // no worker to take them, they would wait in this thread's task pool for a thread
    // that runs out of work, and the sequencer would forward nothing until then: a lone
    // decoder's graph runs them now (the sampler is not started yet, so this is short).
    if (impl_->lone_decoder) impl_->graph->wait_for_all();
  });
  try {
    Impl* impl = impl_.get();
    if (impl->lone_decoder) {
      impl->admitter = std::make_unique<Admitter>([impl](long long n) { impl->send_and_run(n); },
                                                  kLoneDecoderThreadName, [impl] { return impl->admitter_look(); });
      impl->admitter->join();  // starts the sampler and decodes the first depth
    } else {
      impl->admitter = std::make_unique<Admitter>(
          [impl](long long n) { impl->limiter->decrementer().try_put(static_cast<Decrement>(n)); }, "tf-admitter",
          [impl] { return impl->admitter_look(); });
    }
  } catch (...) {  // no thread to be had: the graph is running, so stop it before failing
    stop();
    impl_->tear_down();
    throw;
  }
}

SplitPipeline::~SplitPipeline() {
  stop();
  impl_->admitter.reset();  // joins it, before the graph it feeds goes
  impl_->tear_down();
}

void SplitPipeline::stop() noexcept {
  impl_->stopping.store(true, std::memory_order_release);
  impl_->wake_trainer();
  if (impl_->admitter) impl_->admitter->stop();
}

std::size_t SplitPipeline::prefetch_depth() const noexcept { return impl_->depth.load(std::memory_order_acquire); }

std::uint64_t SplitPipeline::admitter_wakes() const noexcept { return impl_->admitter->wakes(); }

BatchSlot* SplitPipeline::pop(double& waited_us, std::optional<std::chrono::steady_clock::time_point> deadline) {
  Impl& s = *impl_;
  waited_us = 0;
  if (s.delivered_error) std::rethrow_exception(s.delivered_error);

  // After stop() nothing is handed out, not even batches already in the ring: stop() may
  // have cut their decoding short.
  if (s.stopping.load(std::memory_order_acquire)) throw s.stopped_error();
  const auto called = Clock::now();
  if (s.unfinished_pop && called - s.unfinished_pop->returned > Impl::kResumeWithin) s.unfinished_pop.reset();
  BatchSlot* slot = nullptr;
  std::optional<Clock::time_point> wait_start;
  if (s.unfinished_pop) wait_start = s.unfinished_pop->wait_start;
  if (!s.ring.pop(slot)) {
    Clock::time_point start;  // set by wait_for_batches, once it has sent the admissions
    if (!s.wait_for_batches(start, deadline)) {
      // Nothing taken: a call right after this one continues it (see unfinished_pop).
      if (!s.unfinished_pop) s.unfinished_pop = Impl::UnfinishedPop{called, start, {}};
      s.unfinished_pop->returned = Clock::now();
      return nullptr;
    }
    s.ring.pop(slot);  // holds at least one: only this thread pops
    if (!wait_start) wait_start = start;
  }
  if (wait_start) waited_us = std::chrono::duration<double, std::micro>(Clock::now() - *wait_start).count();
  const Clock::time_point step_end = s.unfinished_pop ? s.unfinished_pop->called : called;
  s.unfinished_pop.reset();
  slot->observe();
  // One batch has left the prefetch window: another may start. Admissions are handed to
  // the admitter thread in bulk, half the depth at a time (see hand_off_pending): the
  // trainer never pays TBB's cost of waking a decoder, and pays a futex wake only when the
  // ring runs low (once per hand-off). A paced trainer hands off every whole run, which the
  // admitter's own timed look collects before the ring runs low (admitter_look): no wake at
  // all. A trainer that finds the ring empty sends the pending admissions and those the
  // admitter holds itself (above), as it waits in any case.
  ++s.pending_admissions;
  // When the ring is low, every whole run popped so far goes with the wake: one wake of the
  // admitter and the decoders refills as much as it can (at a slow step, 3/4 of the depth).
  const std::size_t bulk =
      s.pace.paced() ? s.run : std::max<std::size_t>(1, s.depth.load(std::memory_order_relaxed) / 2);
  const bool handed_off =
      (s.ring_low() || s.pending_admissions >= static_cast<Decrement>(bulk)) && s.hand_off_pending();
  if (!handed_off) s.wake_admitter_if_low();

  if (slot->error) {
    s.delivered_error = slot->error;
    s.pool->release(slot);
    std::rethrow_exception(s.delivered_error);
  }
  const std::optional<std::chrono::nanoseconds> step = s.pace.popped(step_end);
  if (s.auto_depth) s.auto_controller.observe_pop(step, waited_us);
  s.pace.returned(Clock::now());
  return slot;
}

}  // namespace tokenfeed
