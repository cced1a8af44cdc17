#include "util/id_list.hpp"

#include <algorithm>
#include <cassert>

namespace tokenfeed {
namespace {

constexpr std::uint64_t kNarrowBound = std::uint64_t{1} << 32;  // uint32 holds ids below it

// ids[p] for every p in `positions`, in place. Positions in random order over a list far
// larger than the caches: each read is prefetched a few dozen positions ahead.
template <typename T>
void gather_in_place(const IdVector<T>& ids, IdVector<T>& positions) {
  constexpr std::size_t kAhead = 32;
  const std::size_t n = positions.size();
  for (std::size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(ids.data() + positions[i + kAhead]);
    positions[i] = ids[static_cast<std::size_t>(positions[i])];
  }
}

}  // namespace

IdList::IdList(std::vector<std::uint64_t> ids) {
  if (!ids.empty() && *std::max_element(ids.begin(), ids.end()) >= kNarrowBound) {
    storage_ = Storage::u64;
    wide_.assign(ids.begin(), ids.end());
    return;
  }
  narrow_.assign(ids.begin(), ids.end());
}

IdList::IdList(std::initializer_list<std::uint64_t> ids) : IdList(std::vector<std::uint64_t>(ids)) {}

IdList IdList::iota(std::uint64_t n) noexcept {
  IdList list;
  list.storage_ = Storage::iota;
  list.iota_size_ = n;
  return list;
}

IdList IdList::for_ids_below(std::uint64_t bound, std::size_t capacity) {
  IdList list;
  if (bound > kNarrowBound) {
    list.storage_ = Storage::u64;
    list.wide_.reserve(capacity);
  } else {
    list.narrow_.reserve(capacity);
  }
  return list;
}

void IdList::push_back(std::uint64_t id) {
  assert(storage_ != Storage::iota);
  if (storage_ == Storage::u32) {
    assert(id < kNarrowBound);
    narrow_.push_back(static_cast<std::uint32_t>(id));
  } else {
    wide_.push_back(id);
  }
}

std::size_t IdList::id_bytes() const noexcept {
  switch (storage_) {
    case Storage::iota:
      return 0;
    case Storage::u32:
      return sizeof(std::uint32_t);
    case Storage::u64:
      break;
  }
  return sizeof(std::uint64_t);
}

std::size_t IdList::memory_bytes() const noexcept {
  return narrow_.capacity() * sizeof(std::uint32_t) + wide_.capacity() * sizeof(std::uint64_t);
}

std::uint64_t IdList::size() const noexcept {
  switch (storage_) {
    case Storage::iota:
      return iota_size_;
    case Storage::u32:
      return narrow_.size();
    case Storage::u64:
      break;
  }
  return wide_.size();
}

IdList IdList::gather(IdList positions) const {
  if (storage_ == Storage::iota) return positions;  // (*this)[p] == p
  if (storage_ == Storage::u32 && positions.storage_ == Storage::u32) {
    gather_in_place(narrow_, positions.narrow_);
    return positions;
  }
  if (storage_ == Storage::u64 && positions.storage_ == Storage::u64) {
    gather_in_place(wide_, positions.wide_);
    return positions;
  }
  const std::uint64_t n = positions.size();
  IdList out;
  out.storage_ = storage_;
  if (storage_ == Storage::u32) {
    out.narrow_.resize(static_cast<std::size_t>(n));
    for (std::uint64_t i = 0; i < n; ++i) out.narrow_[i] = narrow_[static_cast<std::size_t>(positions[i])];
  } else {
    out.wide_.resize(static_cast<std::size_t>(n));
    for (std::uint64_t i = 0; i < n; ++i) out.wide_[i] = wide_[static_cast<std::size_t>(positions[i])];
  }
  return out;
}

std::vector<std::uint64_t> IdList::to_vector() const {
  std::vector<std::uint64_t> ids(static_cast<std::size_t>(size()));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = (*this)[i];
  return ids;
}

bool operator==(const IdList& a, const IdList& b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::uint64_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

bool operator==(const IdList& a, const std::vector<std::uint64_t>& b) noexcept {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

}  // namespace tokenfeed
