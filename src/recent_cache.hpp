// RecentCache: the few most recently made values of an expensive pure function of a key
// (an epoch's order, an epoch's packing), shared immutably.
//
// Thread-safety: get() may be called concurrently. A value is made outside the lock (it
// can take a while); when two threads make the same key at once, the first stored wins
// and both return it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace tokenfeed {

template <typename Value>
class RecentCache {
 public:
  explicit RecentCache(std::size_t capacity) : capacity_(capacity) {}

  // The value for `key`, made by make() (returning a Value) when it is not cached.
  template <typename Make>
  std::shared_ptr<const Value> get(std::uint64_t key, Make&& make) const {
    if (auto cached = find(key)) return cached;
    auto made = std::make_shared<const Value>(make());
    std::lock_guard lock(mutex_);
    for (const auto& [k, v] : entries_) {
      if (k == key) return v;
    }
    if (entries_.size() >= capacity_) entries_.erase(entries_.begin());
    entries_.emplace_back(key, made);
    return made;
  }

 private:
  std::shared_ptr<const Value> find(std::uint64_t key) const {
    std::lock_guard lock(mutex_);
    for (const auto& [k, v] : entries_) {
      if (k == key) return v;
    }
    return nullptr;
  }

  std::size_t capacity_;
  mutable std::mutex mutex_;
  mutable std::vector<std::pair<std::uint64_t, std::shared_ptr<const Value>>> entries_;  // GUARDED_BY(mutex_), oldest first
};

}  // namespace tokenfeed
