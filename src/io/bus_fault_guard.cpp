#include "io/bus_fault_guard.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <mutex>

namespace tokenfeed::bus_fault_guard {
namespace {

// Enough for every shard file of the largest datasets we know of, times a few loaders.
constexpr std::size_t kMaxMappings = 16384;

enum : std::uint32_t { kFree = 0, kClaimed = 1, kActive = 2 };

struct Registration {
  std::atomic<std::uint32_t> state{kFree};
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};  // rounded up to whole pages
  std::atomic<bool> damaged{false};
};

std::array<Registration, kMaxMappings> registrations;
std::atomic<std::size_t> high_water{0};  // registrations below this index may be active
std::atomic<std::uint64_t> faults{0};
std::uintptr_t page_size = 4096;
struct sigaction previous {};

// The disposition before ours, for faults that are not ours.
void forward(int signal, siginfo_t* info, void* context) {
  if ((previous.sa_flags & SA_SIGINFO) != 0 && previous.sa_sigaction != nullptr) {
    previous.sa_sigaction(signal, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
    previous.sa_handler(signal);
  } else {
    // Default action (ignoring a fault would retry it forever): restore it and return, so
    // the faulting instruction runs again and the kernel applies it.
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(SIGBUS, &fallback, nullptr);
  }
}

void on_bus_fault(int signal, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  const std::size_t n = high_water.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    Registration& r = registrations[i];
    if (r.state.load(std::memory_order_acquire) != kActive) continue;
    if (address < r.begin.load(std::memory_order_relaxed) || address >= r.end.load(std::memory_order_relaxed)) continue;
    // Mark first: whoever reads the zeros below checks damaged() after reading.
    r.damaged.store(true, std::memory_order_seq_cst);
    faults.fetch_add(1, std::memory_order_seq_cst);
    void* page = reinterpret_cast<void*>(address & ~(page_size - 1));
    if (::mmap(page, page_size, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
      errno = saved_errno;
      return;  // the read is retried and sees zeros
    }
    break;
  }
  errno = saved_errno;
  forward(signal, info, context);
}

void install_handler() {
  page_size = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  struct sigaction action {};
  action.sa_sigaction = on_bus_fault;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &previous);
}

}  // namespace

std::uint32_t register_mapping(const void* data, std::size_t size) noexcept {
  static std::once_flag installed;
  try {
    std::call_once(installed, install_handler);
  } catch (...) {
    return kUnguarded;
  }
  const auto begin = reinterpret_cast<std::uintptr_t>(data);
  const std::uintptr_t end = begin + (size + page_size - 1) / page_size * page_size;
  for (std::size_t i = 0; i < kMaxMappings; ++i) {
    Registration& r = registrations[i];
    std::uint32_t expected = kFree;
    if (!r.state.compare_exchange_strong(expected, kClaimed, std::memory_order_acq_rel)) continue;
    r.begin.store(begin, std::memory_order_relaxed);
    r.end.store(end, std::memory_order_relaxed);
    r.damaged.store(false, std::memory_order_relaxed);
    std::size_t water = high_water.load(std::memory_order_relaxed);
    while (water < i + 1 && !high_water.compare_exchange_weak(water, i + 1, std::memory_order_release)) {
    }
    r.state.store(kActive, std::memory_order_release);
    return static_cast<std::uint32_t>(i);
  }
  return kUnguarded;
}

void unregister_mapping(std::uint32_t registration) noexcept {
  if (registration == kUnguarded) return;
  registrations[registration].state.store(kFree, std::memory_order_release);
}

bool damaged(std::uint32_t registration) noexcept {
  return registration != kUnguarded && registrations[registration].damaged.load(std::memory_order_seq_cst);
}

std::uint64_t fault_count() noexcept { return faults.load(std::memory_order_seq_cst); }

}  // namespace tokenfeed::bus_fault_guard
