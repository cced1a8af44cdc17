// ReadAhead: whether a split's sampler stage should ask the source to read pages ahead.
//
// While decodes incur major page faults (data not in the page cache: a cold start), the
// sampler plans kBatches batches beyond what the limiter admitted and asks the source to
// madvise(WILLNEED) their pages, so that the kernel reads them concurrently instead of one
// fault at a time inside decode. With a warm cache it issues nothing (the system calls
// would only cost time): it turns off after kQuietDecodes decodes without a major fault
// and on again at the next one. TOKENFEED_READ_AHEAD=0 in the environment keeps it off
// (MappedFile::hints_enabled), for measuring its effect.
//
// Thread-safety: on() may be read by any thread; watch_faults() is called by the decoders,
// concurrently.
#pragma once

#include <atomic>
#include <cstdint>

namespace tokenfeed {

class ReadAhead {
 public:
  // How many batches the sampler plans beyond the admitted ones while on.
  static constexpr std::size_t kBatches = 8;

  ReadAhead();

  bool allowed() const noexcept { return allowed_; }
  bool on() const noexcept { return on_.load(std::memory_order_relaxed); }

  // After a decode on the calling thread: turns read-ahead on when this thread took major
  // page faults since its last check, off after kQuietDecodes decodes without. Checking
  // costs a getrusage (about half a microsecond), so while off only every
  // kFaultCheckEvery-th decode of a thread checks. Does nothing when not allowed.
  void watch_faults() noexcept;

 private:
  static constexpr std::uint64_t kQuietDecodes = 64;
  static constexpr std::uint64_t kFaultCheckEvery = 4;

  const bool allowed_;
  std::atomic<bool> on_;
  std::atomic<std::uint64_t> quiet_decodes_{0};
};

}  // namespace tokenfeed
