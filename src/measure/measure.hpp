// Measurement helpers shared by `tokenfeed bench` (tools/), the benchmarks (perf/) and the
// Python module's stats(), so that the three report the same figures the same way:
// what counts as a stall, a trainer step's CPU time, CPU time used, the process's
// anonymous memory.
// Percentiles: measure/nearest_rank.hpp.
//
// Not part of the library's core (docs/ARCHITECTURE.md): nothing under src/ but measure/
// includes this.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <fstream>
#include <string>

#include "tokenfeed/batch.hpp"

namespace tokenfeed::measure {

// A get_batch whose batch was not ready and that waited longer than this for it
// (Batch::wait_us) waited for data: a stall.
inline constexpr double kStallUs = 50.0;

// The fields a trainer stand-in reads from each batch: the batch contract (tokens, labels,
// token_weights, position_ids, cu_seqlens) or the episode view (x, y, mask), of those its
// config's `fields` chose (in sft_episode the decoders write only the chosen ones, so the
// config decides what a measurement measures); the stand-in takes the fields' spans and
// reads no values (no consumer work).
enum class TrainerReads { contract, view };

inline const char* to_string(TrainerReads reads) noexcept { return reads == TrainerReads::view ? "view" : "contract"; }

inline void read_fields(const Batch& b, TrainerReads reads) {
  const auto read = [&b](BatchField field, auto accessor) {
    if (b.has_field(field)) (void)(b.*accessor)();
  };
  if (reads == TrainerReads::view) {
    read(BatchField::x, &Batch::x);
    read(BatchField::y, &Batch::y);
    read(BatchField::mask, &Batch::mask);
    return;
  }
  read(BatchField::tokens, &Batch::tokens);
  read(BatchField::labels, &Batch::labels);
  read(BatchField::token_weights, &Batch::token_weights);
  read(BatchField::position_ids, &Batch::position_ids);
  read(BatchField::cu_seqlens, &Batch::cu_seqlens);
}

// Busy-waits `us` microseconds: a training step's CPU time on the trainer's thread.
inline void spin_for(double us) {
  using Clock = std::chrono::steady_clock;
  if (us <= 0) return;
  const auto end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::micro>(us));
  while (Clock::now() < end) {
  }
}

// CPU time (user + system) used so far, in seconds: by every thread of the process, or by
// the calling thread only. The loader's background threads use the difference between the
// two when taken on the trainer's thread.
inline double cpu_seconds(int who) {
  struct rusage usage {};
  if (::getrusage(who, &usage) != 0) return 0;
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}
inline double process_cpu_seconds() { return cpu_seconds(RUSAGE_SELF); }
inline double thread_cpu_seconds() { return cpu_seconds(RUSAGE_THREAD); }

// CPU time one measurement used, in seconds: every thread of the process, and the
// trainer's thread alone (its steps and get_batch). The rest is the loader's background
// threads. The figures bench, perf and Python stats() report are derived here.
struct CpuUse {
  double process_s = 0;
  double trainer_s = 0;
  double background_s() const noexcept { return process_s > trainer_s ? process_s - trainer_s : 0.0; }
  // Microseconds per batch over every thread (0 without batches).
  double us_per_batch(double batches) const noexcept { return batches > 0 ? process_s * 1e6 / batches : 0.0; }
  // Microseconds per batch of the background threads (0 without batches).
  double background_us_per_batch(double batches) const noexcept {
    return batches > 0 ? background_s() * 1e6 / batches : 0.0;
  }
  // The background threads' share of one core over `seconds` of wall time.
  double background_core_fraction(double seconds) const noexcept {
    return seconds > 0 ? background_s() / seconds : 0.0;
  }
};

// RssAnon of this process from /proc/self/status, in MiB (0 when unavailable): the
// memory the loader allocates, without the page cache that maps the dataset.
inline double rss_anon_mb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stod(line.substr(8)) / 1024.0;
  }
  return 0;
}

}  // namespace tokenfeed::measure
