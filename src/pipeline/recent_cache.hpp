// RecentCache: the few most recently made values of an expensive pure function of a key
// (an epoch's order, an epoch's packing), shared immutably, with one value at a time made
// ahead in the background.
//
// Why the background: an epoch's order over 10M episodes takes the best part of a second
// to make, and the pipeline's sampler needs it at the first batch of the epoch. Made there,
// it stalls the trainer at every epoch boundary for that long, far more than the prefetched
// batches cover; prefetch(next epoch) while the current one is consumed hides it.
//
// Thread-safety: get() and prefetch() may be called concurrently. A value is made outside
// the lock (it can take a while); when two threads make the same key at once, the first
// stored wins and both return it. get() of the key being made in the background waits for
// it rather than making it twice. The destructor waits for a background make to finish.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "util/thread_annotations.hpp"

namespace tokenfeed {

// Key: std::uint64_t (an epoch), or any equality-comparable value (an epoch and where it starts).
template <typename Value, typename Key = std::uint64_t>
class RecentCache {
 public:
  explicit RecentCache(std::size_t capacity) : capacity_(capacity) {}
  ~RecentCache() {
    if (worker_.joinable()) worker_.join();
  }
  RecentCache(const RecentCache&) = delete;
  RecentCache& operator=(const RecentCache&) = delete;

  // The value for `key`, made by make() (returning a Value) when it is not cached. Throws
  // what make() throws.
  template <typename Make>
  std::shared_ptr<const Value> get(const Key& key, Make&& make) const {
    {
      MutexLock lock(mutex_);
      while (busy_ && busy_key_ == key) done_.wait(lock.native());
      if (auto cached = find_locked(key)) return cached;
    }
    auto made = std::make_shared<const Value>(make());
    MutexLock lock(mutex_);
    return insert_locked(key, std::move(made));
  }

  // Starts making `key`'s value on a background thread, unless it is cached or another
  // value is being made. A make() that throws stores nothing: get() then makes it again
  // and reports the error. REQUIRES: `make` stays callable until the cache is destroyed
  // (it may refer to the cache's owner if the cache is declared after what make() uses,
  // since members are destroyed in reverse order and the destructor waits for it).
  template <typename Make>
  void prefetch(const Key& key, Make make) const {
    MutexLock lock(mutex_);
    if (busy_ || find_locked(key)) return;
    if (worker_.joinable()) worker_.join();  // the last background make is done (busy_ is false)
    busy_ = true;
    busy_key_ = key;
    worker_ = std::thread([this, key, make = std::move(make)]() mutable {
      std::shared_ptr<const Value> made;
      try {
        made = std::make_shared<const Value>(make());
      } catch (...) {
        made = nullptr;  // get() makes it again in the foreground and throws there
      }
      MutexLock done_lock(mutex_);
      if (made) insert_locked(key, std::move(made));
      busy_ = false;
      done_.notify_all();
    });
  }

 private:
  std::shared_ptr<const Value> find_locked(const Key& key) const TF_REQUIRES(mutex_) {
    for (const auto& [k, v] : entries_) {
      if (k == key) return v;
    }
    return nullptr;
  }

  std::shared_ptr<const Value> insert_locked(const Key& key, std::shared_ptr<const Value> made) const
      TF_REQUIRES(mutex_) {
    if (auto existing = find_locked(key)) return existing;
    if (entries_.size() >= capacity_) entries_.erase(entries_.begin());
    entries_.emplace_back(key, made);
    return made;
  }

  std::size_t capacity_;
  mutable Mutex mutex_;
  mutable std::condition_variable done_;  // notified when a background make ends
  // Oldest first.
  mutable std::vector<std::pair<Key, std::shared_ptr<const Value>>> entries_ TF_GUARDED_BY(mutex_);
  mutable bool busy_ TF_GUARDED_BY(mutex_) = false;  // a background make is running
  mutable Key busy_key_ TF_GUARDED_BY(mutex_){};
  mutable std::thread worker_ TF_GUARDED_BY(mutex_);
};

}  // namespace tokenfeed
