// IdList: a list of 64-bit ids (episode ids, window numbers, positions) stored in the
// narrowest form that holds them: nothing at all for 0, 1, ..., n-1 (iota); 4 bytes an id
// when every id is below 2^32; 8 bytes otherwise. The kept-episode list and the epoch
// orders of a 100M-episode dataset are lists like these: narrow, they take half the memory
// of uint64 vectors, and the kept list takes none when no episode is filtered out.
//
// Reading is by value (operator[] returns the id as uint64), whatever the storage; two
// lists are equal when they hold the same ids in the same order.
//
// Thread-safety: const members may be called concurrently; push_back needs exclusive access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <utility>
#include <vector>

#include "util/huge_page_allocator.hpp"

namespace tokenfeed {

// The storage of a large list of ids (huge pages: see huge_page_allocator.hpp).
template <typename T>
using IdVector = std::vector<T, HugePageAllocator<T>>;

class IdList {
 public:
  // How the ids are stored: not at all (iota), as uint32, or as uint64.
  enum class Storage : std::uint8_t { iota, u32, u64 };

  // An empty list of ids below 2^32.
  IdList() = default;
  // The ids given, narrowed when every one is below 2^32 (a vector of ids is a list of ids:
  // implicit).
  IdList(std::vector<std::uint64_t> ids);
  IdList(std::initializer_list<std::uint64_t> ids);
  // Takes uint32 ids as they are.
  explicit IdList(IdVector<std::uint32_t> ids) noexcept : storage_(Storage::u32), narrow_(std::move(ids)) {}
  // Takes uint64 ids as they are (even when they would fit uint32).
  explicit IdList(IdVector<std::uint64_t> ids) noexcept : storage_(Storage::u64), wide_(std::move(ids)) {}

  // 0, 1, ..., n-1, stored as nothing.
  static IdList iota(std::uint64_t n) noexcept;
  // An empty list for ids below `bound` (uint32 when bound <= 2^32), with room for
  // `capacity` ids reserved (address space: pages are used as ids are added).
  static IdList for_ids_below(std::uint64_t bound, std::size_t capacity = 0);

  // Appends `id`. REQUIRES: not iota; id below the bound the list was made for (an id of
  // 2^32 or more needs uint64 storage).
  void push_back(std::uint64_t id);

  Storage storage() const noexcept { return storage_; }
  // Bytes per id: 0 (iota), 4 or 8.
  std::size_t id_bytes() const noexcept;
  // Bytes of ids held (the capacity of the storage).
  std::size_t memory_bytes() const noexcept;

  std::uint64_t size() const noexcept;
  bool empty() const noexcept { return size() == 0; }
  // The i-th id. REQUIRES: i < size().
  std::uint64_t operator[](std::uint64_t i) const noexcept {
    switch (storage_) {
      case Storage::iota:
        return i;
      case Storage::u32:
        return narrow_[static_cast<std::size_t>(i)];
      case Storage::u64:
        break;
    }
    return wide_[static_cast<std::size_t>(i)];
  }

  // The list { (*this)[p] for p in positions }, stored as narrowly as this list (in
  // positions' storage when the widths match, so that no second list is allocated).
  // REQUIRES: every position < size().
  IdList gather(IdList positions) const;

  // Iteration in order, by value.
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::uint64_t;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = std::uint64_t;
    const_iterator() = default;
    const_iterator(const IdList* list, std::uint64_t i) noexcept : list_(list), i_(i) {}
    std::uint64_t operator*() const noexcept { return (*list_)[i_]; }
    const_iterator& operator++() noexcept {
      ++i_;
      return *this;
    }
    const_iterator operator++(int) noexcept { return {list_, i_++}; }
    friend bool operator==(const const_iterator& a, const const_iterator& b) noexcept { return a.i_ == b.i_; }

   private:
    const IdList* list_ = nullptr;
    std::uint64_t i_ = 0;
  };
  const_iterator begin() const noexcept { return {this, 0}; }
  const_iterator end() const noexcept { return {this, size()}; }

  std::vector<std::uint64_t> to_vector() const;

  friend bool operator==(const IdList& a, const IdList& b) noexcept;
  friend bool operator==(const IdList& a, const std::vector<std::uint64_t>& b) noexcept;

 private:
  Storage storage_ = Storage::u32;
  std::uint64_t iota_size_ = 0;     // when iota
  IdVector<std::uint32_t> narrow_;  // when u32
  IdVector<std::uint64_t> wide_;    // when u64
};

}  // namespace tokenfeed
