#include "pipeline/trainer_waiter.hpp"

namespace tokenfeed {

void TrainerWaiter::sleep_until(std::uint32_t seen, Clock::time_point deadline) {
  timed_waiters_.fetch_add(1, std::memory_order_seq_cst);
  {
    MutexLock lock(timed_mutex_);
    while (signal_.load(std::memory_order_seq_cst) == seen) {
      if (timed_cv_.wait_until(lock.native(), deadline) == std::cv_status::timeout) break;
    }
  }
  timed_waiters_.fetch_sub(1, std::memory_order_release);
}

void TrainerWaiter::pushed(std::size_t ready, bool urgent) noexcept {
  signal_.fetch_add(1, std::memory_order_seq_cst);
  if (urgent || ready >= wake_at_.load(std::memory_order_seq_cst)) notify();
}

void TrainerWaiter::interrupt() noexcept {
  signal_.fetch_add(1, std::memory_order_seq_cst);
  notify();
}

void TrainerWaiter::notify() noexcept {
  signal_.notify_all();
  if (timed_waiters_.load(std::memory_order_seq_cst) != 0) {
    const MutexLock lock(timed_mutex_);
    timed_cv_.notify_all();
  }
}

}  // namespace tokenfeed
