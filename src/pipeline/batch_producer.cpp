#include "pipeline/batch_producer.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include <oneapi/tbb/info.h>

#include "io/mapped_file.hpp"
#include "tokenfeed/log.hpp"

namespace tokenfeed {
namespace {

namespace flow = tbb::flow;
using detail::BatchSlot;
using Clock = std::chrono::steady_clock;

// Set on the trainer's thread while it runs the graph's tasks itself (help).
thread_local bool t_helping = false;
struct HelpingScope {
  HelpingScope() noexcept { t_helping = true; }
  ~HelpingScope() { t_helping = false; }
  HelpingScope(const HelpingScope&) = delete;
  HelpingScope& operator=(const HelpingScope&) = delete;
};

// TBB lets a process have hardware threads - 1 workers by default. More decode threads
// than that (decode_threads = 2 on a 2-core machine: the trainer's core is idle while it
// waits, so pure production can use it) need the limit raised while the pipeline runs;
// otherwise the arena silently gets fewer workers than asked for.
std::unique_ptr<tbb::global_control> worker_limit_for(std::size_t threads) {
  const auto allowed =
      static_cast<std::size_t>(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
  if (threads + 1 <= allowed && threads + 1 <= static_cast<std::size_t>(tbb::info::default_concurrency())) {
    return nullptr;
  }
  return std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, threads + 1);
}

// Batches per run: 4 at the depths auto starts from and above, fewer for a shallow fixed
// depth, whose few batches would otherwise travel in one or two runs and leave the
// decoders idle while the trainer drains them.
std::size_t run_length_for(std::size_t depth) noexcept {
  if (depth >= 16 && depth % BatchProducer::kMaxRun == 0) return BatchProducer::kMaxRun;
  if (depth >= 8 && depth % 2 == 0) return 2;
  return 1;
}

}  // namespace

BatchProducer::BatchProducer(BatchSource& source, std::shared_ptr<detail::BatchPool> pool,
                             const SplitPipeline::Options& options, TrainerWaiter& waiter, Admitter::NextLook next_look)
    : source_(source),
      pool_(std::move(pool)),
      options_(options),
      auto_depth_(options.max_prefetch_depth > options.prefetch_depth),
      run_(run_length_for(options.prefetch_depth)),
      max_depth_(std::max(options.prefetch_depth, options.max_prefetch_depth) / run_ * run_),
      lone_decoder_(options.threads == 1),
      waiter_(waiter),
      depth_(options.prefetch_depth),
      ring_(std::max(pool_->capacity(), pool_->size())),
      plans_(max_depth_ + run_),
      next_step_(options.start_step),
      ahead_(ReadAhead::kBatches + 1),
      auto_controller_(options.prefetch_depth, max_depth_, options.threads),
      worker_limit_(worker_limit_for(options.threads)),
      // One slot is reserved for the thread that builds and tears down the graph, so that
      // it always joins the arena itself: with every worker slot taken, execute() would
      // hand its functor to a worker instead (a hand-off TSan cannot see into). A lone
      // decoder's arena has no worker slot at all: its three slots are reserved for the
      // threads that run its tasks, the admitter and the trainer, and for that one.
      arena_(lone_decoder_ ? 3 : static_cast<int>(options.threads) + 1, lone_decoder_ ? 3 : 1) {
  if (auto_depth_) {
    log_line(LogLevel::debug, "[tokenfeed] split=" + pool_->split() +
                                  " prefetch_depth=" + std::to_string(options.prefetch_depth) + " (auto start, max " +
                                  std::to_string(max_depth_) + ")");
  }
  arena_.execute([this] {
    build();
    // Edges made in build() spawn the buffer nodes' forwarding tasks on this thread. With
    // no worker to take them, they would wait in this thread's task pool for a thread
    // that runs out of work, and the sequencer would forward nothing until then: a lone
    // decoder's graph runs them now (the sampler is not started yet, so this is short).
    if (lone_decoder_) graph_->wait_for_all();
  });
  try {
    start(std::move(next_look));
  } catch (...) {  // no thread to be had: the graph is running, so stop it before failing
    stop();
    tear_down();
    throw;
  }
}

BatchProducer::~BatchProducer() {
  stop();
  admitter_.reset();  // joins it, before the graph it feeds goes
  tear_down();
}

void BatchProducer::start(Admitter::NextLook next_look) {
  if (lone_decoder_) {
    admitter_ = std::make_unique<Admitter>([this](long long n) { send_and_run(n); },
                                           SplitPipeline::kLoneDecoderThreadName, std::move(next_look));
    admitter_->join();  // starts the sampler and decodes the first depth
  } else {
    admitter_ =
        std::make_unique<Admitter>([this](long long n) { limiter_->decrementer().try_put(static_cast<Decrement>(n)); },
                                   "tf-admitter", std::move(next_look));
  }
}

void BatchProducer::stop() noexcept {
  stopping_.store(true, std::memory_order_release);
  if (admitter_) admitter_->stop();
}

Error BatchProducer::stopped_error() const {
  return Error(ErrorKind::usage, "get_batch on split '" + pool_->split() + "' after the loader was stopped");
}

void BatchProducer::send(Decrement runs) {
  if (runs == 0) return;
  limiter_->decrementer().try_put(runs);
  // Put from outside the arena, the tasks wait there for a thread of it: a lone decoder's
  // arena has no worker, so the admitter thread runs them.
  if (lone_decoder_) admitter_->join();
}

void BatchProducer::prefetch_next() const noexcept {
  if (ring_.read_available() == 0) return;
  const auto* next = reinterpret_cast<const char*>(ring_.front());
  constexpr std::size_t kLine = 64;
  for (std::size_t at = 0; at < sizeof(BatchSlot); at += kLine) __builtin_prefetch(next + at, 1);
}

bool BatchProducer::help(Decrement runs) {
  const std::uint64_t before = helped_runs_;
  const HelpingScope helping;
  if (lone_decoder_) {
    // Put from inside the arena, the tasks start in this thread's own pool: the trainer
    // decodes at once, and the admitter thread, joined, takes what it can beside it. Put
    // from outside, they would wait for whichever thread came first, and a trainer slower
    // to get there than the admitter would only wait.
    arena_.execute([&] {
      if (runs != 0) {
        limiter_->decrementer().try_put(runs);
        admitter_->join();
      }
      graph_->wait_for_all();
    });
  } else {
    graph_->wait_for_all();
  }
  return helped_runs_ > before;
}

// The admitter's send for a lone decoder: on the admitter thread, joins the arena, admits
// `runs` more and runs the graph's tasks until every admitted batch is ready (the trainer
// may run some beside it, see help). The sampler starts on the first call, so that its
// first task is spawned here, not on the thread that built the graph.
void BatchProducer::send_and_run(Decrement runs) {
  arena_.execute([&] {
    if (!activated_) {
      activated_ = true;
      sampler_->activate();
    }
    if (runs != 0) limiter_->decrementer().try_put(runs);
    graph_->wait_for_all();
  });
}

void BatchProducer::push_run(BatchPlan* run_plans, std::size_t n) {
  MutexLock lock(plans_mutex_);
  for (std::size_t i = 0; i < n; ++i)
    plans_.push_back(RunPlan{std::move(run_plans[i]), i + 1 == n});  // the limiter bounds it
}

std::size_t BatchProducer::pop_run(std::array<BatchPlan, kMaxRun>& out) {
  MutexLock lock(plans_mutex_);
  for (std::size_t n = 0;;) {  // every token is preceded by its run
    RunPlan p = plans_.pop_front();
    out[n++] = std::move(p.plan);
    if (p.ends_run) return n;
  }
}

// Plans the next batch (and, for read-ahead, a few beyond it), in step order.
void BatchProducer::plan_ahead(std::size_t wanted) {
  while (!planning_failed_ && ahead_.size() < wanted) {
    const std::uint64_t step = next_step_++;
    BatchPlan plan;
    try {
      plan = source_.plan(step);
    } catch (...) {
      planning_failed_ = true;
      plan = BatchPlan{};
      plan.step = step;
      plan.error = std::current_exception();
    }
    if (!plan.error && read_ahead_.on()) source_.will_need(plan);
    ahead_.push_back(std::move(plan));
  }
}

flow::continue_msg BatchProducer::plan_next(tbb::flow_control& fc) {
  const BodyOrder::Scope scope(body_order_);
  if (stopping() || failed()) {
    fc.stop();
    return {};
  }
  // A run of `run_` plans, cut after a failed one (it goes out, then production stops).
  std::array<BatchPlan, kMaxRun> made;
  std::size_t n = 0;
  while (n < run_) {
    plan_ahead(read_ahead_.on() ? ReadAhead::kBatches + 1 : 1);
    made[n] = ahead_.pop_front();
    if (made[n++].error) {
      failed_.store(true, std::memory_order_release);
      break;
    }
  }
  push_run(made.data(), n);
  return {};
}

// Decodes the next run into slots linked by run_next; returns the first, whose sequence is
// the run's place in the stream.
BatchSlot* BatchProducer::decode_run() {
  const BodyOrder::Scope scope(body_order_);
  if (t_helping) ++helped_runs_;
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
  first->sequence = (run_plans[0].step - options_.start_step) / run_;
  first->publish();
  return first;
}

BatchSlot* BatchProducer::decode_one(const BatchPlan& plan, int decoder) {
  BatchSlot* slot = pool_->acquire(decoder);
  if (slot == nullptr) {
    // Cannot happen while the limiter and the held-batch cap hold; if it does, fail
    // loudly rather than lose a step (the sequencer would wait for it forever).
    std::terminate();
  }
  slot->observe();
  slot->run_next = nullptr;
  slot->step = plan.step;
  slot->error = plan.error;
  if (!slot->error && stopping()) {
    // Not decoded: such a slot must never reach the trainer as a batch (pop() also refuses
    // to hand anything out after stop()).
    slot->error = std::make_exception_ptr(stopped_error());
  }
  if (!slot->error) {
    const auto start = Clock::now();
    try {
      source_.decode(plan, *slot);
      if (MappedFile::any_damaged()) source_.check_intact();
    } catch (...) {
      failed_.store(true, std::memory_order_release);
      slot->error = std::current_exception();
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
    auto_controller_.record_decode(static_cast<std::uint64_t>(ns));
    read_ahead_.watch_faults();
  }
  slot->publish();
  return slot;
}

// Applies a depth the trainer's side asked for, one run's slots per call (each collate
// calls it): slots first, then their admissions. Allocating a larger step at once
// (zero-filled buffers: 30 MiB for 48 slots of 4x8192) would keep this serial stage from
// pushing batches for milliseconds, long enough to empty the ring of a trainer whose waits
// asked for depth.
void BatchProducer::apply_growth() {
  const std::size_t want = std::min(auto_controller_.requested(), max_depth_) / run_ * run_;
  const std::size_t have = depth_.load(std::memory_order_relaxed);
  if (want <= have || stopping()) return;
  const std::size_t next = std::min(want, have + run_);
  pool_->grow_to(pool_->size() + (next - have));
  depth_.store(next, std::memory_order_release);
  limiter_->decrementer().try_put(static_cast<Decrement>((next - have) / run_));
  if (next == want) {
    log_line(LogLevel::info, "[tokenfeed] split=" + pool_->split() + " prefetch_depth=" + std::to_string(want) +
                                 " (auto, max " + std::to_string(max_depth_) + "; " + auto_controller_.note() + ")");
  }
}

void BatchProducer::collate(BatchSlot* first) {
  const BodyOrder::Scope scope(body_order_);
  first->observe();
  bool failure = false;
  for (BatchSlot* slot = first; slot != nullptr;) {
    BatchSlot* next = slot->run_next;  // read before the push: the trainer may take the slot at once
    failure |= slot->error != nullptr;
    // Never fails: at most pool_->capacity() slots exist and the ring holds that many.
    const bool pushed = ring_.push(slot);
    (void)pushed;
    slot = next;
  }
  waiter_.pushed(ring_.read_available(), failure);
  if (auto_depth_) apply_growth();
}

std::size_t BatchProducer::sequence_of(BatchSlot* slot) {
  const BodyOrder::Scope scope(body_order_);
  slot->observe();
  return static_cast<std::size_t>(slot->sequence);
}

// Cancels the graph's queued work and waits for the bodies running. REQUIRES: stopping.
void BatchProducer::tear_down() {
  arena_.execute([this] {
    graph_->cancel();
    graph_->wait_for_all();
  });
  body_order_.after_teardown();
}

void BatchProducer::build() {
  graph_ = std::make_unique<flow::graph>(graph_context_);
  sampler_ = std::make_unique<flow::input_node<flow::continue_msg>>(
      *graph_, NodeBody<BatchProducer, &BatchProducer::plan_next>(*this));
  limiter_ = std::make_unique<flow::limiter_node<flow::continue_msg, Decrement>>(*graph_, max_depth_ / run_);
  // One decoder more than the workers: the trainer's thread, while it helps.
  decode_ = std::make_unique<flow::function_node<flow::continue_msg, SlotMessage>>(
      *graph_, options_.threads + 1, NodeBody<BatchProducer, &BatchProducer::decode_body>(*this));
  sequencer_ = std::make_unique<flow::sequencer_node<SlotMessage>>(
      *graph_, NodeBody<BatchProducer, &BatchProducer::sequence_body>(*this));
  collator_ = std::make_unique<flow::function_node<SlotMessage, flow::continue_msg>>(
      *graph_, flow::serial, NodeBody<BatchProducer, &BatchProducer::collate_body>(*this));
  flow::make_edge(*sampler_, *limiter_);
  flow::make_edge(*limiter_, *decode_);
  flow::make_edge(*decode_, *sequencer_);
  flow::make_edge(*sequencer_, *collator_);
  // The headroom above the starting depth stays reserved until auto depth hands it out.
  const std::size_t reserved = (max_depth_ - options_.prefetch_depth) / run_;
  if (reserved > 0) limiter_->decrementer().try_put(-static_cast<Decrement>(reserved));
  body_order_.graph_built();
  if (!lone_decoder_) sampler_->activate();  // else on the admitter thread: send_and_run
}

}  // namespace tokenfeed
