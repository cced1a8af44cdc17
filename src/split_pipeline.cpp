#include "split_pipeline.hpp"

#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>
#include <thread>

#include <boost/lockfree/spsc_queue.hpp>
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>

#include "tokenfeed/error.hpp"

namespace tokenfeed {
namespace {

namespace flow = tbb::flow;
using detail::BatchSlot;
using Clock = std::chrono::steady_clock;

// How long pop() spins before it sleeps on the futex: long enough to catch a batch that
// is about to land without a syscall, short enough not to steal a core from the stages.
constexpr auto kSpinBeforeWait = std::chrono::microseconds(50);

}  // namespace

struct SplitPipeline::Impl {
  const BatchSource& source;
  std::shared_ptr<detail::BatchPool> pool;
  Options options;

  boost::lockfree::spsc_queue<BatchSlot*> ring;

  // Plans travel from the sampler to the decode stage through this queue, not inside the
  // graph's messages (which are empty tokens): TBB copies messages into tasks inside
  // libtbb, where TSan cannot see the ordering, so our data never rides in them. Which
  // decode task takes which plan does not matter: the sequencer restores step order.
  // Bounded: at most prefetch_depth plans are in flight, plus one the sampler made
  // while the limiter was full.
  std::mutex plans_mutex;
  std::vector<BatchPlan> plans;      // GUARDED_BY(plans_mutex); a circular buffer
  std::size_t plans_head = 0;        // GUARDED_BY(plans_mutex)
  std::size_t plans_count = 0;       // GUARDED_BY(plans_mutex)
  std::atomic<std::uint64_t> next_step;
  std::atomic<bool> stopping{false};
  std::atomic<bool> failed{false};  // a stage failed: produce nothing more
  // Bumped after every push into the ring and on stop; pop() sleeps on it.
  std::atomic<std::uint32_t> signal{0};
  // Bumped (release) as each node body returns; read (acquire) after wait_for_all, so
  // that everything our bodies did happens-before the teardown, visibly to TSan.
  std::atomic<std::uint64_t> bodies_done{0};

  // Marks the end of a node body (all its accesses) for the teardown; see bodies_done.
  struct BodyScope {
    Impl& impl;
    ~BodyScope() { impl.bodies_done.fetch_add(1, std::memory_order_release); }
  };

  // Consumer-side state (only touched by the thread calling pop()).
  std::exception_ptr delivered_error;

  tbb::task_arena arena;
  std::unique_ptr<flow::graph> graph;
  std::unique_ptr<flow::input_node<flow::continue_msg>> sampler;
  std::unique_ptr<flow::limiter_node<flow::continue_msg>> limiter;
  std::unique_ptr<flow::function_node<flow::continue_msg, BatchSlot*>> decode;
  std::unique_ptr<flow::sequencer_node<BatchSlot*>> sequencer;
  std::unique_ptr<flow::function_node<BatchSlot*, flow::continue_msg>> collator;

  Impl(const BatchSource& s, std::shared_ptr<detail::BatchPool> p, Options o)
      : source(s),
        pool(std::move(p)),
        options(o),
        ring(pool->size()),
        plans(o.prefetch_depth + 2),
        next_step(o.start_step),
        arena(static_cast<int>(o.threads), 0) {}

  void push_plan(BatchPlan plan) {
    std::lock_guard lock(plans_mutex);
    if (plans_count == plans.size()) std::terminate();  // the limiter bounds it; see above
    plans[(plans_head + plans_count) % plans.size()] = std::move(plan);
    ++plans_count;
  }

  BatchPlan pop_plan() {
    std::lock_guard lock(plans_mutex);
    if (plans_count == 0) std::terminate();  // every token is preceded by its plan
    BatchPlan plan = std::move(plans[plans_head]);
    plans_head = (plans_head + 1) % plans.size();
    --plans_count;
    return plan;
  }

  flow::continue_msg plan_next(tbb::flow_control& fc) {
    const BodyScope scope{*this};
    if (stopping.load(std::memory_order_acquire) || failed.load(std::memory_order_acquire)) {
      fc.stop();
      return {};
    }
    const std::uint64_t step = next_step.fetch_add(1, std::memory_order_relaxed);
    BatchPlan plan;
    try {
      plan = source.plan(step);
    } catch (...) {
      failed.store(true, std::memory_order_release);
      plan.step = step;
      plan.error = std::current_exception();
    }
    push_plan(std::move(plan));
    return {};
  }

  BatchSlot* decode_one() {
    const BodyScope scope{*this};
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
    if (!slot->error && !stopping.load(std::memory_order_acquire)) {
      try {
        source.decode(plan, *slot);
      } catch (...) {
        failed.store(true, std::memory_order_release);
        slot->error = std::current_exception();
      }
    }
    slot->publish();
    return slot;
  }

  void collate(BatchSlot* slot) {
    const BodyScope scope{*this};
    slot->observe();
    // Never fails: at most pool->size() slots exist and the ring holds that many.
    const bool pushed = ring.push(slot);
    (void)pushed;
    signal.fetch_add(1, std::memory_order_release);
    signal.notify_all();
  }

  void build() {
    graph = std::make_unique<flow::graph>();
    sampler = std::make_unique<flow::input_node<flow::continue_msg>>(
        *graph, [this](tbb::flow_control& fc) { return plan_next(fc); });
    limiter = std::make_unique<flow::limiter_node<flow::continue_msg>>(*graph, options.prefetch_depth);
    decode = std::make_unique<flow::function_node<flow::continue_msg, BatchSlot*>>(
        *graph, options.threads, [this](const flow::continue_msg&) { return decode_one(); });
    sequencer = std::make_unique<flow::sequencer_node<BatchSlot*>>(*graph, [this](BatchSlot* const& slot) {
      const BodyScope scope{*this};
      slot->observe();
      return static_cast<std::size_t>(slot->sequence);
    });
    collator = std::make_unique<flow::function_node<BatchSlot*, flow::continue_msg>>(
        *graph, flow::serial, [this](BatchSlot* slot) {
          collate(slot);
          return flow::continue_msg();
        });
    flow::make_edge(*sampler, *limiter);
    flow::make_edge(*limiter, *decode);
    flow::make_edge(*decode, *sequencer);
    flow::make_edge(*sequencer, *collator);
    sampler->activate();
  }
};

SplitPipeline::SplitPipeline(const BatchSource& source, std::shared_ptr<detail::BatchPool> pool, Options options)
    : impl_(std::make_unique<Impl>(source, std::move(pool), options)) {
  impl_->arena.execute([this] { impl_->build(); });
}

SplitPipeline::~SplitPipeline() {
  stop();
  Impl& s = *impl_;
  s.arena.execute([&s] {
    s.graph->cancel();
    s.graph->wait_for_all();
  });
  (void)s.bodies_done.load(std::memory_order_acquire);
}

void SplitPipeline::stop() noexcept {
  impl_->stopping.store(true, std::memory_order_release);
  impl_->signal.fetch_add(1, std::memory_order_release);
  impl_->signal.notify_all();
}

BatchSlot* SplitPipeline::pop(double& waited_us) {
  Impl& s = *impl_;
  waited_us = 0;
  if (s.delivered_error) std::rethrow_exception(s.delivered_error);

  BatchSlot* slot = nullptr;
  if (!s.ring.pop(slot)) {
    const auto start = Clock::now();
    while (true) {
      if (s.stopping.load(std::memory_order_acquire)) {
        throw Error(ErrorKind::usage, "get_batch on split '" + s.pool->split() + "' after the loader was stopped");
      }
      const std::uint32_t seen = s.signal.load(std::memory_order_acquire);
      if (s.ring.pop(slot)) break;
      if (Clock::now() - start < kSpinBeforeWait) {
        std::this_thread::yield();
      } else {
        s.signal.wait(seen, std::memory_order_acquire);
      }
    }
    waited_us = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  }
  slot->observe();
  // One batch has left the prefetch window: let the sampler start another.
  s.limiter->decrementer().try_put(flow::continue_msg());

  if (slot->error) {
    s.delivered_error = slot->error;
    s.pool->release(slot);
    std::rethrow_exception(s.delivered_error);
  }
  return slot;
}

}  // namespace tokenfeed
