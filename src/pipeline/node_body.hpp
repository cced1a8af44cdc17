// NodeBody, BodyOrder and HandOff: how the flow graph's node bodies and messages reach
// the pipeline, with the hand-offs made inside libtbb visible to ThreadSanitizer through
// our own atomics.
//
// Debian's libtbb is not instrumented, so TSan cannot see the ordering TBB provides when
// it copies a body into its node on the building thread and calls it on a worker, or runs
// a serial node's successive bodies on different threads. Rather than suppress whole
// classes of reports (tests/tsan.supp names only TBB's own frames), every body goes
// through these, which cost an acquire load and a release increment per call.
//
// Thread-safety: as stated per member.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

namespace tokenfeed {

// Orders node bodies for TSan. Scope marks one body call: on entry it acquires `built`
// (everything set up before the graph started happens-before the body) and the last
// body's end (a serial node's successive bodies are ordered through it, so the
// single-producer ring's consumer, acquiring the write index of the latest push, also sees
// the slots earlier pushes on other threads wrote); on exit it releases its own accesses.
// after_teardown() acquires every body's end once the graph has finished.
class BodyOrder {
 public:
  // Once the graph is built, just before it starts.
  void graph_built() noexcept { built_.store(true, std::memory_order_release); }
  // After wait_for_all(): every body's accesses happen-before the teardown.
  void after_teardown() const noexcept { (void)bodies_done_.load(std::memory_order_acquire); }

  class Scope {
   public:
    explicit Scope(BodyOrder& order) noexcept : order_(order) {
      (void)order_.built_.load(std::memory_order_acquire);
      (void)order_.bodies_done_.load(std::memory_order_acquire);
    }
    ~Scope() { order_.bodies_done_.fetch_add(1, std::memory_order_release); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    BodyOrder& order_;
  };

 private:
  std::atomic<bool> built_{false};
  std::atomic<std::uint64_t> bodies_done_{0};
};

// A flow-graph node body that calls `Member` on its owner. TBB copies a body into its node
// on the thread that builds the graph and calls it on a worker that may already have been
// running; the owner pointer therefore travels through an atomic, stored with release
// when the body is made (or copied) and loaded with acquire on every call.
template <class Owner, auto Member>
class NodeBody {
 public:
  explicit NodeBody(Owner& owner) noexcept { owner_.store(&owner, std::memory_order_release); }
  NodeBody(const NodeBody& other) noexcept {
    owner_.store(other.owner_.load(std::memory_order_acquire), std::memory_order_release);
  }
  NodeBody& operator=(const NodeBody&) = delete;
  ~NodeBody() = default;

  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return (owner_.load(std::memory_order_acquire)->*Member)(std::forward<Args>(args)...);
  }

 private:
  std::atomic<Owner*> owner_;
};

// A pointer carried in a flow-graph message. TBB copies a message into its buffers and
// tasks on one thread and reads it on another, ordered inside libtbb; every access here is
// atomic (a copy is a release store of an acquire load), so TSan sees that order too (a
// plain pointer read in a body, before its BodyOrder::Scope, was reported as a race). The
// pointer is accessed through std::atomic_ref, never initialised by a plain store: TBB
// constructs messages in buffer cells where an earlier message was read on another thread,
// and std::atomic's constructor is a plain write, which TSan reported against that read.
template <class T>
class HandOff {
 public:
  HandOff() noexcept { set(nullptr); }
  explicit HandOff(T* pointer) noexcept { set(pointer); }
  HandOff(const HandOff& other) noexcept { set(other.get()); }
  HandOff& operator=(const HandOff& other) noexcept {
    set(other.get());
    return *this;
  }
  ~HandOff() = default;

  T* get() const noexcept { return std::atomic_ref<T*>(pointer_).load(std::memory_order_acquire); }

 private:
  void set(T* pointer) noexcept { std::atomic_ref<T*>(pointer_).store(pointer, std::memory_order_release); }

  // Written only by set() (every constructor calls it), read only by get().
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-member-init)
  alignas(std::atomic_ref<T*>::required_alignment) mutable T* pointer_;
};

}  // namespace tokenfeed
