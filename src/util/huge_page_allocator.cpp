#include "util/huge_page_allocator.hpp"

#include <sys/mman.h>

#include <cstdlib>

namespace tokenfeed::huge_pages {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
// Below this an array is not worth a huge page's rounding (and fits the TLB anyway).
constexpr std::size_t kThreshold = std::size_t{16} << 20;

std::size_t rounded(std::size_t bytes) noexcept { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

}  // namespace

void* allocate(std::size_t bytes) {
  if (bytes < kThreshold) return ::operator new(bytes);
  void* p = std::aligned_alloc(kHugePage, rounded(bytes));
  if (p == nullptr) throw std::bad_alloc();
  ::madvise(p, rounded(bytes), MADV_HUGEPAGE);  // a hint: failure leaves ordinary pages
  return p;
}

void deallocate(void* p, std::size_t bytes) noexcept {
  if (bytes < kThreshold) {
    ::operator delete(p);
    return;
  }
  std::free(p);
}

}  // namespace tokenfeed::huge_pages
