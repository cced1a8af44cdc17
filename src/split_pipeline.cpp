#include "split_pipeline.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
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

#include "mapped_file.hpp"
#include "tokenfeed/error.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {
namespace {

namespace flow = tbb::flow;
using detail::BatchSlot;
using Clock = std::chrono::steady_clock;

// How long pop() spins before it sleeps on the futex: long enough to catch a batch that
// is about to land without a syscall, short enough not to steal a core from the stages.
constexpr auto kSpinBeforeWait = std::chrono::microseconds(50);

// Auto depth: pops per decision window, and the shortest wait that counts (a wait of a
// few microseconds is a batch landing just in time, not a stall).
constexpr std::uint64_t kAutoWindow = 32;
constexpr double kAutoWaitUs = 20.0;

// Read-ahead: how many batches the sampler plans beyond the admitted ones, and how many
// consecutive decodes without a major page fault turn it off again.
constexpr std::size_t kReadAheadBatches = 8;
constexpr std::uint64_t kReadAheadQuietBatches = 64;
constexpr std::uint64_t kFaultCheckEvery = 4;

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

long thread_major_faults() noexcept {
  struct rusage usage {};
  if (::getrusage(RUSAGE_THREAD, &usage) != 0) return 0;
  return usage.ru_majflt;
}

// A first-in first-out queue of plans with a capacity fixed at construction, so that the
// steady state allocates nothing (std::deque allocates a block every few batches).
// Overflow and underflow are bugs in the bounds argued where the queues are used: they end
// the process rather than lose or invent a step the sequencer would wait for forever.
// Not thread-safe.
class PlanQueue {
 public:
  explicit PlanQueue(std::size_t capacity) : items_(capacity) {}
  std::size_t size() const noexcept { return count_; }
  void push_back(BatchPlan plan) {
    if (count_ == items_.size()) std::terminate();
    items_[(head_ + count_) % items_.size()] = std::move(plan);
    ++count_;
  }
  BatchPlan pop_front() {
    if (count_ == 0) std::terminate();
    BatchPlan plan = std::move(items_[head_]);
    head_ = (head_ + 1) % items_.size();
    --count_;
    return plan;
  }

 private:
  std::vector<BatchPlan> items_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

// A flow-graph node body: calls `Member` on the pipeline. TBB copies a body into its node
// on the thread that builds the graph and calls it on a worker that may already have been
// running, a hand-off made inside libtbb, which ThreadSanitizer cannot see (Debian's
// libtbb is not instrumented). The body therefore reaches the pipeline through an atomic
// stored with release when the body is made (or copied) and loaded with acquire on every
// call, so that the hand-off is visible to TSan through our own code and the suppressions
// need not name it (tests/tsan.supp).
template <class Owner, auto Member>
class NodeBody {
 public:
  explicit NodeBody(Owner& owner) noexcept { owner_.store(&owner, std::memory_order_release); }
  NodeBody(const NodeBody& other) noexcept { owner_.store(other.owner_.load(std::memory_order_acquire), std::memory_order_release); }
  NodeBody& operator=(const NodeBody&) = delete;
  ~NodeBody() = default;

  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return (owner_.load(std::memory_order_acquire)->*Member)(std::forward<Args>(args)...);
  }

 private:
  std::atomic<Owner*> owner_;
};

}  // namespace

std::size_t SplitPipeline::next_auto_depth(std::size_t current, std::size_t max, std::uint64_t waits,
                                           double step_us, double decode_us, std::size_t threads) noexcept {
  // Production per batch with every decoder busy, against the trainer's step: when it
  // keeps up on average, the waits were jitter, and a deeper queue absorbs it. When it
  // does not, the trainer waits in any case; the starting depth (kAutoStartDepth) is
  // already past the point where a deeper queue helps a busy decoder (perf/RESULTS.md).
  const double produce_us = decode_us / static_cast<double>(std::max<std::size_t>(threads, 1));
  if (waits == 0 || current >= max || !(produce_us < step_us)) return current;
  return std::min(max, current * 2);
}

SplitPipeline::Depths SplitPipeline::plan_depths(std::int64_t configured, std::int64_t memory_mb,
                                                 std::size_t slot_bytes, std::size_t threads,
                                                 std::size_t held) noexcept {
  if (configured > 0) {
    const auto d = static_cast<std::size_t>(configured);
    return {d, d};
  }
  const std::size_t budget = static_cast<std::size_t>(std::max<std::int64_t>(memory_mb, 1)) << 20;
  const std::size_t fit = budget / std::max<std::size_t>(slot_bytes, 1);
  const std::size_t max = std::clamp<std::size_t>(fit > held ? fit - held : 1, 1, kMaxAutoDepth);
  // Enough to keep every decoder busy while batches wait in the ring, and for pop() to
  // admit new batches in bulk (see pop).
  const std::size_t initial = std::min(max, std::max(threads + 2, kAutoStartDepth));
  return {initial, max};
}

struct SplitPipeline::Impl {
  const BatchSource& source;
  std::shared_ptr<detail::BatchPool> pool;
  Options options;
  const bool auto_depth;
  const std::size_t max_depth;

  boost::lockfree::spsc_queue<BatchSlot*> ring;

  // Plans travel from the sampler to the decode stage through this queue, not inside the
  // graph's messages (which are empty tokens): TBB copies messages into tasks inside
  // libtbb, where TSan cannot see the ordering, so our data never rides in them. Which
  // decode task takes which plan does not matter: the sequencer restores step order.
  // Bounded: at most max_depth plans are in flight, plus one the sampler made while the
  // limiter was full.
  std::mutex plans_mutex;
  PlanQueue plans;  // GUARDED_BY(plans_mutex)
  std::atomic<std::uint64_t> next_step;
  std::atomic<bool> stopping{false};
  std::atomic<bool> failed{false};  // a stage failed: produce nothing more
  // Bumped after every push into the ring and on stop (wake_trainer); pop() sleeps on it.
  std::atomic<std::uint32_t> signal{0};
  // A pop() with a deadline sleeps on timed_cv instead, since an atomic wait has no
  // timeout. wake_trainer() takes timed_mutex only while timed_waiters is not 0: the
  // seq_cst bump of signal and load of timed_waiters, against the waiter's seq_cst
  // increment and load of signal, make sure one side sees the other (no lost wake-up).
  std::mutex timed_mutex;
  std::condition_variable timed_cv;
  std::atomic<std::uint32_t> timed_waiters{0};

  void wake_trainer() noexcept {
    signal.fetch_add(1, std::memory_order_seq_cst);
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
  // Bumped (release) as each node body returns; read (acquire) after wait_for_all, so
  // that everything our bodies did happens-before the teardown, visibly to TSan.
  std::atomic<std::uint64_t> bodies_done{0};
  // Set (release) once the graph is built, just before it starts; see BodyScope.
  std::atomic<bool> built{false};

  // Sampler-only state (the input_node body is never called concurrently).
  PlanQueue ahead;  // planned, not yet admitted
  bool planning_failed = false;

  // Read-ahead switch: on while decodes take major page faults (never when disabled).
  const bool read_ahead_allowed;
  std::atomic<bool> read_ahead;
  std::atomic<std::uint64_t> quiet_decodes{0};

  // Production measurements, written by the decoders.
  std::atomic<std::uint64_t> decode_ns{0};
  std::atomic<std::uint64_t> decodes{0};

  // Depth: `depth` is in effect (set by the collator), `requested_depth` asked for by pop().
  std::atomic<std::size_t> depth;
  std::atomic<std::size_t> requested_depth;
  std::mutex note_mutex;
  std::string growth_note;  // GUARDED_BY(note_mutex): why the last request was made

  // Marks the end of a node body (all its accesses) for the teardown; see bodies_done.
  // Also acquires `built`, so that everything set up before the graph started
  // happens-before the body, visibly to TSan (TBB's own hand-off to a worker that was
  // already running is not).
  // And acquires `bodies_done` on entry: a serial node (the sampler, the collator) runs
  // its successive bodies on whichever threads TBB picks, ordered by TBB inside libtbb.
  // Because every body ends with a release RMW on `bodies_done`, this acquire makes each
  // body's accesses happen-before the next body's, visibly to TSan. That matters for the
  // single-producer ring: the consumer acquires the write index from the latest push,
  // and must thereby see the slots that earlier pushes, on other threads, wrote.
  struct BodyScope {
    Impl& impl;
    explicit BodyScope(Impl& i) : impl(i) {
      (void)impl.built.load(std::memory_order_acquire);
      (void)impl.bodies_done.load(std::memory_order_acquire);
    }
    ~BodyScope() { impl.bodies_done.fetch_add(1, std::memory_order_release); }
  };

  // Consumer-side state (only touched by the thread calling pop()).
  std::exception_ptr delivered_error;
  Decrement pending_admissions = 0;  // batches popped whose admission is not yet sent

  // Sends the pending admissions to the limiter now, on the trainer's thread: for when the
  // trainer is about to wait anyway and the decoders must start at once.
  void admit_pending() {
    if (pending_admissions == 0) return;
    limiter->decrementer().try_put(pending_admissions);
    pending_admissions = 0;
  }

  // Hands the pending admissions to the admitter thread: for when the ring still holds
  // batches. A decrement may wake a sleeping decoder, which takes TBB tens of microseconds
  // on the calling thread (on a 2-core VM, 8x1024 with a 2 ms step: get_batch's p99 was
  // 36-45 us with the trainer sending them, 20-29 us handed off, same build and runs; 4-5
  // us with admissions 16 times rarer); handed off, the trainer pays at most a futex wake,
  // and only when the admitter sleeps.
  void hand_off_pending() {
    if (pending_admissions == 0) return;
    admissions.fetch_add(static_cast<std::uint32_t>(pending_admissions), std::memory_order_release);
    admissions.notify_one();
    pending_admissions = 0;
  }

  // Admissions handed off by pop(), plus kAdmitterStop once the pipeline stops. The count
  // is at most the pool's size, far below the stop bit.
  static constexpr std::uint32_t kAdmitterStop = 1U << 31;
  std::atomic<std::uint32_t> admissions{0};
  std::thread admitter;  // started after build(), joined by the destructor

  void admitter_loop() {
    while (true) {
      const std::uint32_t taken = admissions.fetch_and(kAdmitterStop, std::memory_order_acq_rel);
      if ((taken & kAdmitterStop) != 0) return;
      if (taken == 0) {
        admissions.wait(0, std::memory_order_acquire);
        continue;
      }
      limiter->decrementer().try_put(static_cast<Decrement>(taken));
    }
  }
  struct Window {
    std::uint64_t pops = 0;
    std::uint64_t waits = 0;     // waits over kAutoWaitUs
    double step_us = 0;          // the trainer's time between pops, waits excluded
    std::uint64_t decode_ns = 0;  // the decoders' counters at the window's start
    std::uint64_t decodes = 0;
  } window;
  std::uint64_t pops_since_change = 0;
  Clock::time_point last_return{};
  bool returned_once = false;

  std::unique_ptr<tbb::global_control> worker_limit;  // see worker_limit_for; outlives the arena's use
  tbb::task_arena arena;
  std::unique_ptr<flow::graph> graph;
  std::unique_ptr<flow::input_node<flow::continue_msg>> sampler;
  std::unique_ptr<flow::limiter_node<flow::continue_msg, Decrement>> limiter;
  std::unique_ptr<flow::function_node<flow::continue_msg, BatchSlot*>> decode;
  std::unique_ptr<flow::sequencer_node<BatchSlot*>> sequencer;
  std::unique_ptr<flow::function_node<BatchSlot*, flow::continue_msg>> collator;

  Impl(const BatchSource& s, std::shared_ptr<detail::BatchPool> p, Options o)
      : source(s),
        pool(std::move(p)),
        options(o),
        auto_depth(o.max_prefetch_depth > o.prefetch_depth),
        max_depth(std::max(o.prefetch_depth, o.max_prefetch_depth)),
        ring(std::max(pool->capacity(), pool->size())),
        plans(max_depth + 2),
        next_step(o.start_step),
        ahead(kReadAheadBatches + 1),
        read_ahead_allowed(MappedFile::hints_enabled()),
        read_ahead(read_ahead_allowed),
        depth(o.prefetch_depth),
        requested_depth(o.prefetch_depth),
        worker_limit(worker_limit_for(o.threads)),
        // One slot is reserved for the thread that builds and tears down the graph, so that
        // it always joins the arena itself: with every worker slot taken, execute() would
        // hand its functor to a worker instead (a hand-off TSan cannot see into).
        arena(static_cast<int>(o.threads) + 1, 1) {}

  Error stopped_error() const {
    return Error(ErrorKind::usage, "get_batch on split '" + pool->split() + "' after the loader was stopped");
  }

  void push_plan(BatchPlan plan) {
    std::lock_guard lock(plans_mutex);
    plans.push_back(std::move(plan));  // the limiter bounds it; see above
  }

  BatchPlan pop_plan() {
    std::lock_guard lock(plans_mutex);
    return plans.pop_front();  // every token is preceded by its plan
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
      if (!plan.error && read_ahead.load(std::memory_order_relaxed)) source.will_need(plan);
      ahead.push_back(std::move(plan));
    }
  }

  flow::continue_msg plan_next(tbb::flow_control& fc) {
    const BodyScope scope(*this);
    if (stopping.load(std::memory_order_acquire) || failed.load(std::memory_order_acquire)) {
      fc.stop();
      return {};
    }
    plan_ahead(read_ahead.load(std::memory_order_relaxed) ? kReadAheadBatches + 1 : 1);
    BatchPlan plan = ahead.pop_front();
    if (plan.error) failed.store(true, std::memory_order_release);  // this one goes out, then stop
    push_plan(std::move(plan));
    return {};
  }

  BatchSlot* decode_one() {
    const BodyScope scope(*this);
    const BatchPlan plan = pop_plan();
    BatchSlot* slot = pool->acquire();
    if (slot == nullptr) {
      // Cannot happen while the limiter and the held-batch cap hold; if it does, fail
      // loudly rather than lose a step (the sequencer would wait for it forever).
      std::terminate();
    }
    slot->observe();
    slot->sequence = plan.step - options.start_step;
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
      decode_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
      decodes.fetch_add(1, std::memory_order_relaxed);
      if (read_ahead_allowed) watch_faults();
    }
    slot->publish();
    return slot;
  }

  // Turns read-ahead on when this thread took major page faults since its last check, and
  // off after kReadAheadQuietBatches decodes without. getrusage costs about half a
  // microsecond, so with read-ahead off only every kFaultCheckEvery-th decode checks.
  void watch_faults() {
    thread_local long last_faults = thread_major_faults();
    thread_local std::uint64_t decodes_here = 0;
    const bool on = read_ahead.load(std::memory_order_relaxed);
    if (!on && ++decodes_here % kFaultCheckEvery != 0) return;
    const long faults = thread_major_faults();
    const bool faulted = faults != last_faults;
    last_faults = faults;
    if (faulted) {
      quiet_decodes.store(0, std::memory_order_relaxed);
      if (!on) read_ahead.store(true, std::memory_order_relaxed);
    } else if (on && quiet_decodes.fetch_add(1, std::memory_order_relaxed) + 1 >= kReadAheadQuietBatches) {
      read_ahead.store(false, std::memory_order_relaxed);
    }
  }

  // Applies a depth pop() asked for: slots first, then the admissions.
  void apply_growth() {
    const std::size_t want = requested_depth.load(std::memory_order_acquire);
    const std::size_t have = depth.load(std::memory_order_relaxed);
    if (want <= have || stopping.load(std::memory_order_acquire)) return;
    pool->grow_to(pool->size() + (want - have));
    depth.store(want, std::memory_order_release);
    limiter->decrementer().try_put(static_cast<Decrement>(want - have));
    std::string note;
    {
      std::lock_guard lock(note_mutex);
      note = growth_note;
    }
    log_line(LogLevel::info, "[tokenfeed] split=" + pool->split() + " prefetch_depth=" + std::to_string(want) +
                                 " (auto, max " + std::to_string(max_depth) + "; " + note + ")");
  }

  void collate(BatchSlot* slot) {
    const BodyScope scope(*this);
    slot->observe();
    // Never fails: at most pool->capacity() slots exist and the ring holds that many.
    const bool pushed = ring.push(slot);
    (void)pushed;
    wake_trainer();
    if (auto_depth) apply_growth();
  }

  // Consumer side of auto depth: called by pop() once per batch returned.
  void observe_pop(Clock::time_point called, double waited_us) {
    if (returned_once) window.step_us += std::chrono::duration<double, std::micro>(called - last_return).count();
    ++window.pops;
    if (waited_us > kAutoWaitUs) ++window.waits;
    ++pops_since_change;
    if (window.pops < kAutoWindow) return;

    const std::uint64_t ns = decode_ns.load(std::memory_order_relaxed);
    const std::uint64_t n = decodes.load(std::memory_order_relaxed);
    const std::size_t current = requested_depth.load(std::memory_order_relaxed);
    // Warm-up: the first window after a start or a change fills the new depth.
    const bool settled = pops_since_change >= 2 * kAutoWindow;
    if (settled && n > window.decodes) {
      const double step_us = window.step_us / static_cast<double>(window.pops);
      const double decode_us = static_cast<double>(ns - window.decode_ns) / 1000.0 / static_cast<double>(n - window.decodes);
      const std::size_t next = next_auto_depth(current, max_depth, window.waits, step_us, decode_us, options.threads);
      if (next != current) {
        {
          char text[160];
          std::snprintf(text, sizeof text, "%llu waits in %llu steps; trainer step %.0f us, decode %.0f us per batch on %zu thread(s)",
                        static_cast<unsigned long long>(window.waits), static_cast<unsigned long long>(window.pops),
                        step_us, decode_us, options.threads);
          std::lock_guard lock(note_mutex);
          growth_note = text;
        }
        requested_depth.store(next, std::memory_order_release);
        pops_since_change = 0;
      }
    }
    window = Window{};
    window.decode_ns = ns;
    window.decodes = n;
  }

  std::size_t sequence_of(BatchSlot* slot) {
    const BodyScope scope(*this);
    slot->observe();
    return static_cast<std::size_t>(slot->sequence);
  }

  // The node bodies' entry points, in the shapes TBB calls them with.
  BatchSlot* decode_body(const flow::continue_msg&) { return decode_one(); }
  std::size_t sequence_body(BatchSlot* const& slot) { return sequence_of(slot); }
  flow::continue_msg collate_body(BatchSlot* slot) {
    collate(slot);
    return {};
  }

  // Cancels the graph's queued work and waits for the bodies running. REQUIRES: stopping.
  void tear_down() {
    arena.execute([this] {
      graph->cancel();
      graph->wait_for_all();
    });
    (void)bodies_done.load(std::memory_order_acquire);
  }

  void build() {
    graph = std::make_unique<flow::graph>();
    sampler = std::make_unique<flow::input_node<flow::continue_msg>>(*graph, NodeBody<Impl, &Impl::plan_next>(*this));
    limiter = std::make_unique<flow::limiter_node<flow::continue_msg, Decrement>>(*graph, max_depth);
    decode = std::make_unique<flow::function_node<flow::continue_msg, BatchSlot*>>(
        *graph, options.threads, NodeBody<Impl, &Impl::decode_body>(*this));
    sequencer = std::make_unique<flow::sequencer_node<BatchSlot*>>(*graph, NodeBody<Impl, &Impl::sequence_body>(*this));
    collator = std::make_unique<flow::function_node<BatchSlot*, flow::continue_msg>>(
        *graph, flow::serial, NodeBody<Impl, &Impl::collate_body>(*this));
    flow::make_edge(*sampler, *limiter);
    flow::make_edge(*limiter, *decode);
    flow::make_edge(*decode, *sequencer);
    flow::make_edge(*sequencer, *collator);
    // The headroom above the starting depth stays reserved until auto depth hands it out.
    const std::size_t reserved = max_depth - options.prefetch_depth;
    if (reserved > 0) limiter->decrementer().try_put(-static_cast<Decrement>(reserved));
    built.store(true, std::memory_order_release);
    sampler->activate();
  }
};

SplitPipeline::SplitPipeline(const BatchSource& source, std::shared_ptr<detail::BatchPool> pool, Options options)
    : impl_(std::make_unique<Impl>(source, std::move(pool), options)) {
  if (impl_->auto_depth) {
    log_line(LogLevel::debug, "[tokenfeed] split=" + impl_->pool->split() + " prefetch_depth=" +
                                  std::to_string(options.prefetch_depth) + " (auto start, max " +
                                 std::to_string(impl_->max_depth) + ")");
  }
  impl_->arena.execute([this] { impl_->build(); });
  try {
    impl_->admitter = std::thread([this] { impl_->admitter_loop(); });
  } catch (...) {  // no thread to be had: the graph is running, so stop it before failing
    stop();
    impl_->tear_down();
    throw;
  }
}

SplitPipeline::~SplitPipeline() {
  stop();
  impl_->admitter.join();  // before the graph it feeds goes
  impl_->tear_down();
}

void SplitPipeline::stop() noexcept {
  impl_->stopping.store(true, std::memory_order_release);
  impl_->wake_trainer();
  impl_->admissions.fetch_or(Impl::kAdmitterStop, std::memory_order_release);
  impl_->admissions.notify_one();
}

std::size_t SplitPipeline::prefetch_depth() const noexcept { return impl_->depth.load(std::memory_order_acquire); }

BatchSlot* SplitPipeline::pop(double& waited_us, std::optional<std::chrono::steady_clock::time_point> deadline) {
  Impl& s = *impl_;
  waited_us = 0;
  if (s.delivered_error) std::rethrow_exception(s.delivered_error);

  // After stop() nothing is handed out, not even batches already in the ring: stop() may
  // have cut their decoding short.
  if (s.stopping.load(std::memory_order_acquire)) throw s.stopped_error();
  const auto called = s.auto_depth ? Clock::now() : Clock::time_point{};
  BatchSlot* slot = nullptr;
  if (!s.ring.pop(slot)) {
    s.admit_pending();  // the decoders may be idle, waiting for admissions
    const auto start = Clock::now();
    while (true) {
      if (s.stopping.load(std::memory_order_acquire)) throw s.stopped_error();
      const std::uint32_t seen = s.signal.load(std::memory_order_acquire);
      if (s.ring.pop(slot)) break;
      const auto now = Clock::now();
      if (now - start < kSpinBeforeWait) {
        std::this_thread::yield();
      } else if (!deadline) {
        s.signal.wait(seen, std::memory_order_acquire);
      } else if (now >= *deadline) {
        return nullptr;  // nothing taken: the next call resumes as if this one had not been made
      } else {
        s.wait_until(seen, *deadline);
      }
    }
    waited_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }
  slot->observe();
  // One batch has left the prefetch window: another may start. Admissions are handed to
  // the admitter thread in bulk once the ring is down to half the depth (see
  // hand_off_pending), so a trainer slower than production pays a futex wake at most once
  // every depth/2 steps, and TBB's cost of waking a decoder never.
  ++s.pending_admissions;
  if (s.ring.read_available() <= s.depth.load(std::memory_order_relaxed) / 2) s.hand_off_pending();

  if (slot->error) {
    s.delivered_error = slot->error;
    s.pool->release(slot);
    std::rethrow_exception(s.delivered_error);
  }
  if (s.auto_depth) {
    s.observe_pop(called, waited_us);
    s.last_return = Clock::now();
    s.returned_once = true;
  }
  return slot;
}

}  // namespace tokenfeed
