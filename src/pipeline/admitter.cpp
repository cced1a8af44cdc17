#include "pipeline/admitter.hpp"

#include <utility>

namespace tokenfeed {

Admitter::Admitter(std::function<void(long long)> send) : send_(std::move(send)), thread_([this] { run(); }) {}

Admitter::~Admitter() {
  stop();
  thread_.join();
}

void Admitter::hand_off(std::uint32_t n) noexcept {
  admissions_.fetch_add(n, std::memory_order_release);
  admissions_.notify_one();
}

void Admitter::stop() noexcept {
  admissions_.fetch_or(kStop, std::memory_order_release);
  admissions_.notify_one();
}

void Admitter::run() {
  while (true) {
    const std::uint32_t taken = admissions_.fetch_and(kStop, std::memory_order_acq_rel);
    if ((taken & kStop) != 0) return;
    if (taken == 0) {
      admissions_.wait(0, std::memory_order_acquire);
      continue;
    }
    send_(static_cast<long long>(taken));
  }
}

}  // namespace tokenfeed
