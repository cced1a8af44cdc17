#include "pipeline/admitter.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <utility>

namespace tokenfeed {
namespace {

// The futex calls on the admission word. Both sides use the raw futex (not std::atomic's
// wait/notify, whose notify may skip the wake when its own bookkeeping sees no waiter):
// the thread sleeps with a timeout, which std::atomic::wait cannot do.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::chrono::nanoseconds timeout) noexcept {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(timeout.count() % 1'000'000'000);
  // Returns at once when the word no longer holds `expected`; EINTR and ETIMEDOUT are
  // fine: the caller looks at the word again.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

}  // namespace

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "the futex operates on the atomic's own 32-bit word");

Admitter::Admitter(std::function<void(long long)> send, const char* thread_name, NextLook next_look)
    : send_(std::move(send)), thread_name_(thread_name), next_look_(std::move(next_look)), thread_([this] { run(); }) {}

Admitter::~Admitter() {
  stop();
  thread_.join();
}

void Admitter::hand_off(std::uint32_t n, bool wake) noexcept {
  admissions_.fetch_add(n, std::memory_order_release);
  if (wake) this->wake();
}

void Admitter::wake() noexcept {
  wakes_.fetch_add(1, std::memory_order_relaxed);
  futex_wake(admissions_);
}

void Admitter::join() noexcept {
  admissions_.fetch_or(kJoin, std::memory_order_release);
  futex_wake(admissions_);
}

std::uint32_t Admitter::reclaim() noexcept {
  const std::uint32_t taken = admissions_.fetch_and(kStop | kJoin, std::memory_order_acq_rel);
  return (taken & kStop) != 0 ? 0 : taken & kCount;
}

void Admitter::stop() noexcept {
  admissions_.fetch_or(kStop, std::memory_order_release);
  futex_wake(admissions_);
}

void Admitter::run() {
  pthread_setname_np(pthread_self(), thread_name_);  // fails only for a name too long: then unnamed
  bool just_sent = false;
  while (true) {
    const std::uint32_t taken = admissions_.fetch_and(kStop, std::memory_order_acq_rel);
    if ((taken & kStop) != 0) return;
    if (taken != 0) {
      send_(static_cast<long long>(taken & kCount));
      just_sent = true;
      continue;
    }
    // One timed look per send: a look that found nothing (the trainer away, or slower than
    // foreseen) leaves the rest to wake() and the backstop.
    std::chrono::nanoseconds sleep = kBackstop;
    if (just_sent && next_look_) sleep = std::min(sleep, next_look_().value_or(kBackstop));
    just_sent = false;
    // Sleeps while the word is 0: admissions handed off since the fetch_and above make it
    // return at once, and a wake() finds it asleep or about to look again.
    futex_wait(admissions_, 0, sleep);
  }
}

}  // namespace tokenfeed
