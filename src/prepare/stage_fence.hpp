// StageFence: makes the hand-offs of a preparation's oneTBB parallel_pipeline visible to
// ThreadSanitizer (prepare and prepare-text).
//
// libtbb is not instrumented, so TSan cannot see the ordering its scheduler guarantees (one
// stage of a chunk before the next, the invocations of a serial stage one after another,
// every stage before parallel_pipeline returns). Each stage body holds a StageFence: an
// acquire-release RMW on one shared atomic at entry and at exit (also when it throws), which
// orders every body after the ones that finished before it started. The cost is two RMWs per
// chunk. The atomic is a constant-initialized global, not a local: TSan would see a local's
// initialization as a plain write that the workers' first RMW races with. Concurrent runs
// sharing it only order more. Around the pipeline, the caller publishes its setup with
// publish_to_stages() and takes the stages' work with acquire_from_stages().
//
// Thread-safety: any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace tokenfeed {

inline constinit std::atomic<std::uint64_t> g_stage_sync{0};

class StageFence {
 public:
  StageFence() noexcept { g_stage_sync.fetch_add(1, std::memory_order_acq_rel); }
  ~StageFence() { g_stage_sync.fetch_add(1, std::memory_order_acq_rel); }
  StageFence(const StageFence&) = delete;
  StageFence& operator=(const StageFence&) = delete;
};

// Before the pipeline starts: what the caller set up, for the stages.
inline void publish_to_stages() noexcept { g_stage_sync.fetch_add(1, std::memory_order_release); }
// After the pipeline returned or threw: the stages' work, before the caller reads or destroys it.
inline void acquire_from_stages() noexcept { (void)g_stage_sync.load(std::memory_order_acquire); }

}  // namespace tokenfeed
