#include "pipeline/read_ahead.hpp"

#include <sys/resource.h>

#include "io/mapped_file.hpp"

namespace tokenfeed {
namespace {

long thread_major_faults() noexcept {
  struct rusage usage {};
  if (::getrusage(RUSAGE_THREAD, &usage) != 0) return 0;
  return usage.ru_majflt;
}

}  // namespace

ReadAhead::ReadAhead() : allowed_(MappedFile::hints_enabled()), on_(allowed_) {}

void ReadAhead::watch_faults() noexcept {
  if (!allowed_) return;
  thread_local long last_faults = thread_major_faults();
  thread_local std::uint64_t decodes_here = 0;
  const bool was_on = on_.load(std::memory_order_relaxed);
  if (!was_on && ++decodes_here % kFaultCheckEvery != 0) return;
  const long faults = thread_major_faults();
  const bool faulted = faults != last_faults;
  last_faults = faults;
  if (faulted) {
    quiet_decodes_.store(0, std::memory_order_relaxed);
    if (!was_on) on_.store(true, std::memory_order_relaxed);
  } else if (was_on && quiet_decodes_.fetch_add(1, std::memory_order_relaxed) + 1 >= kQuietDecodes) {
    on_.store(false, std::memory_order_relaxed);
  }
}

}  // namespace tokenfeed
