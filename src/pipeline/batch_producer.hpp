// BatchProducer: the graph's side of a split's pipeline. It owns the oneTBB flow graph
// that fills the ready ring, the threads that run it, and what they share:
//
//   input_node (sampler: the only place the step counter advances and plan() is called;
//               plans a few batches ahead so that their pages can be read ahead, and
//               hands each run of plans to decode through our own queue; the message is
//               an empty token)
//     -> limiter_node (at most the depth's runs in flight or ready)
//     -> function_node decode (parallel, the decode threads and a helping trainer; writes
//               into pooled slots)
//     -> sequencer_node (restores step order)
//     -> function_node collator (serial; pushes into the ring, tells the TrainerWaiter,
//               grows the depth)
//
// Batches travel in runs of a few consecutive steps (one message, one decode task, one
// pass through the sequencer and the collator per run), so that the graph's cost per
// message is paid once a run. The limiter counts runs; the ring and the trainer see
// batches. The trainer's side (pipeline/split_pipeline.cpp) admits more runs through this
// class: by the admitter thread (pipeline/admitter.hpp) in bulk, by itself when it is
// about to wait, or by running the graph's tasks on its own thread (help()).
//
// Thread-safety: pop(), ready(), the admission calls and help() belong to the trainer's
// thread (one at a time); depth(), failed(), stopping() and auto_depth()'s thread-safe
// members may be called from any thread; stop() from any thread, idempotently. The
// destructor stops, joins the admitter and waits for the graph, which ends promptly:
// queued work is cancelled.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <boost/lockfree/spsc_queue.hpp>
#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include "pipeline/admitter.hpp"
#include "pipeline/auto_depth.hpp"
#include "pipeline/batch_pool.hpp"
#include "pipeline/batch_source.hpp"
#include "pipeline/node_body.hpp"
#include "pipeline/read_ahead.hpp"
#include "pipeline/split_pipeline.hpp"
#include "pipeline/trainer_waiter.hpp"
#include "tokenfeed/error.hpp"
#include "util/thread_annotations.hpp"

namespace tokenfeed {

// A first-in first-out queue with a capacity fixed at construction, so that the steady
// state allocates nothing (std::deque allocates a block every few batches). Overflow and
// underflow are bugs in the bounds argued where the queues are used: they end the process
// rather than lose or invent a step the sequencer would wait for forever. Not thread-safe.
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

class BatchProducer {
 public:
  // A limiter decrement: +n admits n more runs; one negative decrement at start reserves
  // the headroom that auto depth hands out later.
  using Decrement = long long;
  // The most batches in one run.
  static constexpr std::size_t kMaxRun = 4;

  // Builds the graph and starts producing: the admitter thread (named
  // SplitPipeline::kLoneDecoderThreadName when it is the lone decoder) runs, and looks on
  // its own after each send at `next_look()`. REQUIRES: as SplitPipeline's constructor;
  // `waiter` outlives the producer. Throws std::system_error when no thread can be had.
  BatchProducer(BatchSource& source, std::shared_ptr<detail::BatchPool> pool, const SplitPipeline::Options& options,
                TrainerWaiter& waiter, Admitter::NextLook next_look);
  ~BatchProducer();
  BatchProducer(const BatchProducer&) = delete;
  BatchProducer& operator=(const BatchProducer&) = delete;

  // The trainer's side of the ring: the next batch in step order, if one is ready; and how
  // many are.
  bool pop(detail::BatchSlot*& slot) noexcept { return ring_.pop(slot); }
  std::size_t ready() const noexcept { return ring_.read_available(); }
  // Starts bringing the next ready batch's slot (its bookkeeping, not its buffers) into
  // this core's cache: the pop that takes it, a trainer's step later, then finds there the
  // lines a decoder wrote on another core instead of waiting for each (they were most of a
  // pop's time at a 500 us step). Does nothing when no batch is ready.
  void prefetch_next() const noexcept;
  // Returns a slot the trainer will not hand out (a failed batch's) to the pool.
  void release(detail::BatchSlot* slot) noexcept { pool_->release(slot); }

  // Admissions, from the trainer's thread. Sends `runs` now, outside the arena (with a lone
  // decoder, the admitter thread then runs their tasks).
  void send(Decrement runs);
  // Hands `runs` (> 0) to the admitter thread, waking it now only with `wake`.
  void hand_off(std::uint32_t runs, bool wake) noexcept { admitter_->hand_off(runs, wake); }
  // Whether the admitter holds admissions not yet sent; wakes it to send them; takes them
  // back for the trainer to send (see Admitter).
  bool admitter_holding() const noexcept { return admitter_->holding(); }
  void wake_admitter() noexcept { admitter_->wake(); }
  Decrement reclaim() noexcept { return static_cast<Decrement>(admitter_->reclaim()); }
  std::uint64_t admitter_wakes() const noexcept { return admitter_->wakes(); }

  // Joins the arena on the trainer's thread and runs the graph's tasks beside the decoders
  // until the graph is idle: every admitted batch is then in the ring. A lone decoder's
  // trainer puts `runs` admissions itself, inside the arena, so that it decodes them at
  // once instead of racing the admitter thread for them (others pass 0, having sent theirs).
  // Returns whether the trainer decoded any run itself.
  bool help(Decrement runs);

  // Batches per run, the decode threads, and whether one decode thread (the admitter
  // thread) decodes.
  std::size_t run() const noexcept { return run_; }
  std::size_t threads() const noexcept { return options_.threads; }
  bool lone_decoder() const noexcept { return lone_decoder_; }
  // The depth in effect (batches admitted ahead of the trainer), and auto depth's state.
  std::size_t depth() const noexcept { return depth_.load(std::memory_order_acquire); }
  bool auto_depth_on() const noexcept { return auto_depth_; }
  std::size_t max_depth() const noexcept { return max_depth_; }
  AutoDepth& auto_depth() noexcept { return auto_controller_; }
  const AutoDepth& auto_depth() const noexcept { return auto_controller_; }

  // Whether a stage failed (produce nothing more), and whether stop() was called.
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  bool stopping() const noexcept { return stopping_.load(std::memory_order_acquire); }
  // Stops producing: the sampler plans nothing more, the admitter sends nothing more.
  // Does not wait.
  void stop() noexcept;
  // The error a pop after stop() throws.
  Error stopped_error() const;

 private:
  // A plan on its way to the decode stage, and whether it is the last of its run.
  struct RunPlan {
    BatchPlan plan;
    bool ends_run = false;
  };
  using SlotMessage = HandOff<detail::BatchSlot>;  // a decoded run's first slot, between the nodes

  void build();
  void start(Admitter::NextLook next_look);
  void tear_down();
  void send_and_run(Decrement runs);

  void push_run(BatchPlan* run_plans, std::size_t n);
  std::size_t pop_run(std::array<BatchPlan, kMaxRun>& out);
  void plan_ahead(std::size_t wanted);
  tbb::flow::continue_msg plan_next(tbb::flow_control& fc);
  detail::BatchSlot* decode_run();
  detail::BatchSlot* decode_one(const BatchPlan& plan, int decoder);
  void apply_growth();
  void collate(detail::BatchSlot* first);
  std::size_t sequence_of(detail::BatchSlot* slot);

  // The node bodies' entry points, in the shapes TBB calls them with.
  SlotMessage decode_body(const tbb::flow::continue_msg&) { return SlotMessage(decode_run()); }
  std::size_t sequence_body(const SlotMessage& slot) { return sequence_of(slot.get()); }
  tbb::flow::continue_msg collate_body(const SlotMessage& slot) {
    collate(slot.get());
    return {};
  }

  // Set at construction.
  BatchSource& source_;
  std::shared_ptr<detail::BatchPool> pool_;
  const SplitPipeline::Options options_;
  const bool auto_depth_;
  const std::size_t run_;
  const std::size_t max_depth_;
  const bool lone_decoder_;
  TrainerWaiter& waiter_;
  BodyOrder body_order_;  // every node body runs inside a BodyOrder::Scope

  // Read by the trainer on every pop: apart from what the decoders and the sampler write.
  alignas(64) std::atomic<bool> stopping_{false};
  std::atomic<bool> failed_{false};  // a stage failed: produce nothing more
  std::atomic<std::size_t> depth_;   // set by the collator
  boost::lockfree::spsc_queue<detail::BatchSlot*> ring_;

  // Plans travel from the sampler to the decode stage through this queue, a run at a time,
  // not inside the graph's messages (which are empty tokens): TBB copies messages into
  // tasks inside libtbb, where TSan cannot see the ordering, so our data never rides in
  // them. Which decode task takes which run does not matter: the sequencer restores step
  // order. Bounded: at most max_depth plans are in flight, plus one run the sampler made
  // while the limiter was full.
  alignas(64) Mutex plans_mutex_;
  FixedQueue<RunPlan> plans_ TF_GUARDED_BY(plans_mutex_);

  // The sampler's (the input_node body is never called concurrently).
  alignas(64) std::uint64_t next_step_;
  FixedQueue<BatchPlan> ahead_;  // planned, not yet admitted
  bool planning_failed_ = false;
  ReadAhead read_ahead_;

  AutoDepth auto_controller_;
  // Runs the trainer decoded while helping (the trainer's thread only).
  std::uint64_t helped_runs_ = 0;
  bool activated_ = false;  // lone decoder: whether the sampler runs yet (admitter thread only)

  std::unique_ptr<tbb::global_control> worker_limit_;  // outlives the arena's use
  tbb::task_arena arena_;
  // Several threads may wait on the graph at once (the admitter of a lone decoder and the
  // trainer helping it): a concurrent_wait context is not reset when one of them returns
  // while the other still runs the graph's tasks.
  tbb::task_group_context graph_context_{
      tbb::task_group_context::isolated,
      tbb::task_group_context::default_traits | tbb::task_group_context::concurrent_wait};
  std::unique_ptr<tbb::flow::graph> graph_;
  std::unique_ptr<tbb::flow::input_node<tbb::flow::continue_msg>> sampler_;
  std::unique_ptr<tbb::flow::limiter_node<tbb::flow::continue_msg, Decrement>> limiter_;
  std::unique_ptr<tbb::flow::function_node<tbb::flow::continue_msg, SlotMessage>> decode_;
  std::unique_ptr<tbb::flow::sequencer_node<SlotMessage>> sequencer_;
  std::unique_ptr<tbb::flow::function_node<SlotMessage, tbb::flow::continue_msg>> collator_;
  std::unique_ptr<Admitter> admitter_;  // started last; reset first by the destructor
};

}  // namespace tokenfeed
