// HugePageAllocator: a std::allocator for large arrays read and written at random (epoch
// permutations, kept-id lists of 100M entries), which asks the kernel to back them with
// transparent huge pages (madvise MADV_HUGEPAGE; a no-op when THP is off). Random accesses
// over hundreds of MiB then miss the TLB far less: a numpy permutation of 100M ids takes
// about half the time. Small arrays come from the ordinary heap.
//
// Thread-safety: stateless; usable from any thread.
#pragma once

#include <cstddef>
#include <new>

namespace tokenfeed {

namespace huge_pages {
// Memory for `bytes` bytes: 2 MiB-aligned and advised for huge pages from kThreshold
// bytes on, else from operator new. Throws std::bad_alloc.
void* allocate(std::size_t bytes);
// REQUIRES: `p` came from allocate(bytes) with the same `bytes`.
void deallocate(void* p, std::size_t bytes) noexcept;
}  // namespace huge_pages

template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;
  HugePageAllocator() noexcept = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(huge_pages::allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { huge_pages::deallocate(p, n * sizeof(T)); }
  template <typename U>
  friend bool operator==(const HugePageAllocator&, const HugePageAllocator<U>&) noexcept {
    return true;
  }
};

}  // namespace tokenfeed
