#include "split_pipeline.hpp"

#include <atomic>
#include <chrono>
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
  std::atomic<std::uint64_t> next_step;
  std::atomic<bool> stopping{false};
  std::atomic<bool> failed{false};  // a stage failed: produce nothing more
  // Bumped after every push into the ring and on stop; pop() sleeps on it.
  std::atomic<std::uint32_t> signal{0};

  // Consumer-side state (only touched by the thread calling pop()).
  std::exception_ptr delivered_error;

  tbb::task_arena arena;
  std::unique_ptr<flow::graph> graph;
  std::unique_ptr<flow::input_node<BatchPlan>> sampler;
  std::unique_ptr<flow::limiter_node<BatchPlan>> limiter;
  std::unique_ptr<flow::function_node<BatchPlan, BatchSlot*>> decode;
  std::unique_ptr<flow::sequencer_node<BatchSlot*>> sequencer;
  std::unique_ptr<flow::function_node<BatchSlot*, flow::continue_msg>> collator;

  Impl(const BatchSource& s, std::shared_ptr<detail::BatchPool> p, Options o)
      : source(s),
        pool(std::move(p)),
        options(o),
        ring(pool->size()),
        next_step(o.start_step),
        arena(static_cast<int>(o.threads) + 1, 0) {}

  BatchPlan plan_next(tbb::flow_control& fc) {
    if (stopping.load(std::memory_order_acquire) || failed.load(std::memory_order_acquire)) {
      fc.stop();
      return {};
    }
    const std::uint64_t step = next_step.fetch_add(1, std::memory_order_relaxed);
    try {
      return source.plan(step);
    } catch (...) {
      failed.store(true, std::memory_order_release);
      BatchPlan failed_plan;
      failed_plan.step = step;
      failed_plan.error = std::current_exception();
      return failed_plan;
    }
  }

  BatchSlot* decode_one(const BatchPlan& plan) {
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
    slot->observe();
    // Never fails: at most pool->size() slots exist and the ring holds that many.
    const bool pushed = ring.push(slot);
    (void)pushed;
    signal.fetch_add(1, std::memory_order_release);
    signal.notify_all();
  }

  void build() {
    graph = std::make_unique<flow::graph>();
    sampler = std::make_unique<flow::input_node<BatchPlan>>(
        *graph, [this](tbb::flow_control& fc) { return plan_next(fc); });
    limiter = std::make_unique<flow::limiter_node<BatchPlan>>(*graph, options.prefetch_depth);
    decode = std::make_unique<flow::function_node<BatchPlan, BatchSlot*>>(
        *graph, options.threads, [this](const BatchPlan& plan) { return decode_one(plan); });
    sequencer = std::make_unique<flow::sequencer_node<BatchSlot*>>(
        *graph, [](BatchSlot* const& slot) { return static_cast<std::size_t>(slot->sequence); });
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
