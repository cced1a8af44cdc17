#include "pipeline/auto_depth.hpp"

#include <algorithm>
#include <cstdio>

namespace tokenfeed {

std::size_t AutoDepth::next(std::size_t current, std::size_t max, std::uint64_t waits, double step_us, double decode_us,
                            std::size_t threads) noexcept {
  // Production per batch with every decoder busy, against the trainer's step: when it
  // keeps up on average, the waits were jitter, and a deeper queue absorbs it. When it
  // does not, the trainer waits in any case; the starting depth (kStartDepth) is already
  // past the point where a deeper queue helps a busy decoder (perf/RESULTS.md).
  const double produce_us = decode_us / static_cast<double>(std::max<std::size_t>(threads, 1));
  if (waits == 0 || current >= max || !(produce_us < step_us)) return current;
  return std::min(max, current * 2);
}

AutoDepth::Depths AutoDepth::plan(std::int64_t configured, std::int64_t memory_mb, std::size_t slot_bytes,
                                  std::size_t threads, std::size_t held) noexcept {
  if (configured > 0) {
    const auto d = static_cast<std::size_t>(configured);
    return {d, d};
  }
  const std::size_t budget = static_cast<std::size_t>(std::max<std::int64_t>(memory_mb, 1)) << 20;
  const std::size_t fit = budget / std::max<std::size_t>(slot_bytes, 1);
  const std::size_t max = std::clamp<std::size_t>(fit > held ? fit - held : 1, 1, kMaxDepth);
  // kStartDepth per decoder: enough to keep every decoder busy while batches wait in the
  // ring, and for pop() to admit (and wake decoders for) batches in bulk. With more decoders
  // than spare cores, as decode_threads=2 on two cores, every wake of a sleeping decoder or
  // trainer costs a context switch, and a deeper ring spaces those out (perf/RESULTS.md).
  const std::size_t initial = std::min(max, kStartDepth * std::max<std::size_t>(threads, 1));
  return {initial, max};
}

void AutoDepth::observe_pop(std::optional<std::chrono::nanoseconds> step, double waited_us) {
  if (step) window_.step_us += std::chrono::duration<double, std::micro>(*step).count();
  ++window_.pops;
  if (waited_us > kWaitUs) ++window_.waits;
  ++pops_since_change_;
  if (window_.pops < kWindow) return;

  const std::uint64_t ns = decode_ns_.load(std::memory_order_relaxed);
  const std::uint64_t n = decodes_.load(std::memory_order_relaxed);
  const std::size_t current = requested_.load(std::memory_order_relaxed);
  // Warm-up: the first window after a start or a change fills the new depth.
  const bool settled = pops_since_change_ >= 2 * kWindow;
  if (settled && n > window_.decodes) {
    const double step_us = window_.step_us / static_cast<double>(window_.pops);
    const double decode_us =
        static_cast<double>(ns - window_.decode_ns) / 1000.0 / static_cast<double>(n - window_.decodes);
    const std::size_t wanted = next(current, max_, window_.waits, step_us, decode_us, threads_);
    if (wanted != current) {
      {
        char text[160];
        std::snprintf(text, sizeof text,
                      "%llu waits in %llu steps; trainer step %.0f us, decode %.0f us per batch on %zu thread(s)",
                      static_cast<unsigned long long>(window_.waits), static_cast<unsigned long long>(window_.pops),
                      step_us, decode_us, threads_);
        MutexLock lock(note_mutex_);
        note_ = text;
      }
      requested_.store(wanted, std::memory_order_release);
      pops_since_change_ = 0;
    }
  }
  window_ = Window{};
  window_.decode_ns = ns;
  window_.decodes = n;
}

std::string AutoDepth::note() const {
  MutexLock lock(note_mutex_);
  return note_;
}

}  // namespace tokenfeed
